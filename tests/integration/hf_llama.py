"""Helper of hf_llama.sh: tiny llama-family models with random weights, and their loss.

  hf_llama.py make CASE DIR        a model of CASE (llama, qwen2, qwen3) saved to DIR
  hf_llama.py check DIR TEXT T EVAL_JSON [--reference-only]
      the loss on the first two samples of T tokens of TEXT (trainer pack's bytes, then the
      end-of-document 256) by transformers (LlamaForCausalLM / Qwen2ForCausalLM) and by the
      independent float64 reference below; both must match trainer eval's loss in EVAL_JSON
      within 1e-5 relative. Qwen3 (not in transformers 4.46) by the reference only.

llama: GQA (4 heads, 2 kv), head_dim 16, rope_theta 5e5 with llama3 rope_scaling (its
wavelengths 6.3, 32 and 167 tokens and more fall in each of its three ranges), untied,
saved sharded (max_shard_size 20KB). qwen2: q/k/v biases, GQA, tied. qwen3: per-head q/k norm,
GQA, head_dim 24 (not hidden / heads), untied, written by hand in transformers 5's config form
(rope_parameters, dtype). Every weight is random (norm weights around 1, biases too), so that
each part of the model moves the loss. Made on the CPU in float32; nothing is downloaded.
"""
import json
import math
import os
import sys

import torch
from safetensors.torch import load_file, save_file

COMMON = dict(vocab_size=257, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
              rms_norm_eps=1e-5, bos_token_id=256, eos_token_id=256)


def randomize(named, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in named:
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(1 + 0.2 * noise if "norm" in name else 0.1 * noise)


def layer_shapes(l, H, KV, D, C, F=None):
    """Block l's tensors as transformers names them: its norms, attention with per-head q/k norms
    (Qwen3's) and, given F, the dense SwiGLU MLP."""
    b = f"model.layers.{l}."
    shapes = {b + "input_layernorm.weight": (C,), b + "post_attention_layernorm.weight": (C,),
              b + "self_attn.q_proj.weight": (H * D, C), b + "self_attn.k_proj.weight": (KV * D, C),
              b + "self_attn.v_proj.weight": (KV * D, C), b + "self_attn.o_proj.weight": (C, H * D),
              b + "self_attn.q_norm.weight": (D,), b + "self_attn.k_norm.weight": (D,)}
    if F:
        shapes.update({b + "mlp.gate_proj.weight": (F, C), b + "mlp.up_proj.weight": (F, C),
                       b + "mlp.down_proj.weight": (C, F)})
    return shapes


def make(case, out):
    import transformers as tf
    if case == "llama":
        cfg = tf.LlamaConfig(**COMMON, head_dim=16, rope_theta=500000.0, tie_word_embeddings=False,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 0.5, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 30})
        model = tf.LlamaForCausalLM(cfg)
        randomize(model.named_parameters(), 1)
        model.save_pretrained(out, max_shard_size="20KB", safe_serialization=True)
    elif case == "qwen2":
        cfg = tf.Qwen2Config(**COMMON, rope_theta=10000.0, tie_word_embeddings=True,
                             use_sliding_window=False)
        model = tf.Qwen2ForCausalLM(cfg)
        randomize(model.named_parameters(), 2)
        model.save_pretrained(out, safe_serialization=True)
    else:  # qwen3: the layout of transformers' Qwen3ForCausalLM, written here
        c = dict(COMMON, head_dim=24)
        H, KV, D, C, F, L = (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                             c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"])
        shapes = {"model.embed_tokens.weight": (c["vocab_size"], C), "model.norm.weight": (C,),
                  "lm_head.weight": (c["vocab_size"], C)}
        for l in range(L):
            shapes.update(layer_shapes(l, H, KV, D, C, F))
        tensors = {k: torch.zeros(s) for k, s in shapes.items()}
        randomize(sorted(tensors.items()), 3)
        os.makedirs(out, exist_ok=True)
        save_file(tensors, f"{out}/model.safetensors", metadata={"format": "pt"})
        c.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_act="silu",
                 attention_bias=False, use_sliding_window=False, tie_word_embeddings=False,
                 dtype="float32", rope_parameters={"rope_type": "default", "rope_theta": 20000.0})
        json.dump(c, open(f"{out}/config.json", "w"), indent=2)


def load_weights(folder):
    index = f"{folder}/model.safetensors.index.json"
    if not os.path.exists(index):
        return load_file(f"{folder}/model.safetensors")
    weights = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        weights.update(load_file(f"{folder}/{shard}"))
    return weights


def inv_freq(cfg, D):
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    f = [1.0 / theta ** (2 * i / D) for i in range(D // 2)]
    if rope.get("rope_type", rope.get("type")) == "llama3":  # Llama 3.1's frequency scaling
        factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        out = []
        for x in f:
            wavelen = 2 * math.pi / x
            if wavelen > old / lo:
                out.append(x / factor)
            elif wavelen < old / hi:
                out.append(x)
            else:
                s = (old / wavelen - lo) / (hi - lo)
                out.append((1 - s) * x / factor + s * x)
        f = out
    return torch.tensor(f, dtype=torch.float64)


def dense_mlp(W, b, x, prefix="mlp."):
    """SwiGLU: down(silu(gate x) * up x) of the projections under b + prefix."""
    gate, up = x @ W[b + prefix + "gate_proj.weight"].T, x @ W[b + prefix + "up_proj.weight"].T
    return (torch.nn.functional.silu(gate) * up) @ W[b + prefix + "down_proj.weight"].T


def reference_logits(folder, tokens, mlp=None):
    """The llama family's forward in float64, from the weights and config.json alone. mlp(W, cfg,
    layer, x) replaces the dense SwiGLU MLP (hf_moe.py's mixture of experts)."""
    cfg = json.load(open(f"{folder}/config.json"))
    W = {k: v.double() for k, v in load_weights(folder).items()}
    mlp = mlp or (lambda W, cfg, l, x: dense_mlp(W, f"model.layers.{l}.", x))
    H, KV, C = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    D = cfg.get("head_dim") or C // H
    eps, T = cfg["rms_norm_eps"], len(tokens)

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def linear(x, name):
        y = x @ W[name + ".weight"].T
        return y + W[name + ".bias"] if name + ".bias" in W else y

    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq(cfg, D)[None, :]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)

    def rope(x):  # (heads, T, D), rotate-half
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    h = W["model.embed_tokens.weight"][torch.tensor(tokens)]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{l}."
        x = rms(h, W[b + "input_layernorm.weight"])
        q, k = linear(x, b + "self_attn.q_proj"), linear(x, b + "self_attn.k_proj")
        qn, kn = W.get(b + "self_attn.q_norm.weight"), W.get(b + "self_attn.k_norm.weight")
        if qn is not None and qn.numel() == H * D != D:  # OLMoE: RMSNorm of all heads together
            q, k = rms(q, qn), rms(k, kn)
        q = q.view(T, H, D).transpose(0, 1)
        k = k.view(T, KV, D).transpose(0, 1)
        v = linear(x, b + "self_attn.v_proj").view(T, KV, D).transpose(0, 1)
        if qn is not None and qn.numel() == D:  # Qwen3: RMSNorm of each head, before RoPE
            q, k = rms(q, qn), rms(k, kn)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(D) + mask, -1) @ v
        h = h + linear(att.transpose(0, 1).reshape(T, H * D), b + "self_attn.o_proj")
        x = rms(h, W[b + "post_attention_layernorm.weight"])
        h = h + mlp(W, cfg, l, x)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return rms(h, W["model.norm.weight"]) @ head.T


def check(folder, text, T, eval_json, reference_only, mlp=None):
    stream = list(open(text, "rb").read()) + [256]
    samples = [(stream[i * T:i * T + T], stream[i * T + 1:i * T + T + 1]) for i in range(2)]
    ce = torch.nn.functional.cross_entropy

    def loss(logits_of):
        return sum(ce(logits_of(x).double(), torch.tensor(y)).item() for x, y in samples) / 2

    got = json.loads(open(eval_json).read().splitlines()[-1])["loss"]
    ref = loss(lambda x: reference_logits(folder, x, mlp))
    arch = json.load(open(f"{folder}/config.json"))["architectures"][0]
    line = f"{folder} ({arch}): trainer eval {got:.7f}; float64 reference {ref:.7f} " \
           f"(relative {abs(got - ref) / ref:.1e})"
    worst = abs(got - ref) / ref
    if not reference_only:
        import transformers as tf
        dtype = "dtype" if int(tf.__version__.split(".")[0]) >= 5 else "torch_dtype"
        model = tf.AutoModelForCausalLM.from_pretrained(folder, **{dtype: torch.float32})
        model.eval()
        with torch.no_grad():
            hf = loss(lambda x: model(torch.tensor([x])).logits[0])
        line += f"; transformers {tf.__version__} {hf:.7f} (relative {abs(got - hf) / hf:.1e})"
        worst = max(worst, abs(got - hf) / hf)
    print(line)
    assert worst < 1e-5, f"{folder}: the trainer's loss is not the model's"


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], "--reference-only" in sys.argv)
