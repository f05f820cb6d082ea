"""Helper of hf_moe.sh: tiny mixture-of-experts models with random weights, and their loss.

  hf_moe.py has FAMILY                 exit 0 when this transformers has FAMILY's class, else 1
  hf_moe.py make FAMILY DIR            a model of FAMILY saved to DIR by transformers
  hf_moe.py check DIR TEXT T EVAL_JSON [--reference-only]
      the loss on the first two samples of T tokens of TEXT (as hf_llama.py check) by
      transformers and by the float64 reference below (hf_llama.py's forward with the mixture of
      experts here); both must match trainer eval's loss in EVAL_JSON within 1e-5 relative.
  hf_moe.py edit DIR WHAT              a broken copy for the refusal tests (see EDITS)

Families (all 8 experts of width 32, top-2, hidden 64, 4 heads over 2 key/value heads):
  qwen2_moe  Qwen2MoeForCausalLM, 3 layers, layer 0 dense (mlp_only_layers [0]), a shared expert
             of 48, softmax then top-2 unnormalised, q/k/v biases; saved in 20 KB shards
  mixtral    MixtralForCausalLM, 2 layers (every layer sparse), top-2 logits renormalised,
             router_jitter_noise 0.01 (training-only noise the import warns about)
  olmoe      OlmoeForCausalLM, 2 layers (every layer sparse), q/k norms over all heads
             together (Model.qk_norm_type=full), 4 key/value heads (as many as heads)
  qwen3_moe  Qwen3MoeForCausalLM, 3 layers, layer 0 dense, per-head q/k norm, head_dim 24,
             norm_topk_prob; made by transformers 5 where it has the class, else written here
             with the experts stacked as transformers 5 holds them (checked by the reference)
The router's weights are drawn wider than the rest so that each token's top-2 is clear.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama import check, dense_mlp, layer_shapes, load_weights, randomize  # noqa: E402

COMMON = dict(vocab_size=257, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=32, rms_norm_eps=1e-5, bos_token_id=256, eos_token_id=256,
              tie_word_embeddings=False, num_experts_per_tok=2)
CLASSES = {"qwen2_moe": "Qwen2MoeForCausalLM", "mixtral": "MixtralForCausalLM",
           "olmoe": "OlmoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


def rope(theta):
    """RoPE's base as transformers 5 (rope_parameters) or 4 (rope_theta) takes it."""
    import transformers as tf
    if int(tf.__version__.split(".")[0]) >= 5:
        return {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}
    return {"rope_theta": theta}


def config(family):
    import transformers as tf
    moe = dict(num_experts=8, moe_intermediate_size=32, intermediate_size=96,
               num_hidden_layers=3, mlp_only_layers=[0], decoder_sparse_step=1)
    if family == "qwen2_moe":
        return tf.Qwen2MoeConfig(**COMMON, **moe, shared_expert_intermediate_size=48,
                                 norm_topk_prob=False, **rope(10000.0))
    if family == "mixtral":
        return tf.MixtralConfig(**COMMON, num_local_experts=8, intermediate_size=32,
                                num_hidden_layers=2, router_jitter_noise=0.01, **rope(1e6))
    if family == "olmoe":
        return tf.OlmoeConfig(**dict(COMMON, num_key_value_heads=4), num_experts=8,
                              intermediate_size=32, num_hidden_layers=2)
    return tf.Qwen3MoeConfig(**COMMON, **moe, head_dim=24, norm_topk_prob=True, **rope(20000.0))


def widen_routers(named):
    with torch.no_grad():
        for name, p in named:
            if name.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight")):
                p.mul_(10)


def make_qwen3_moe(out):
    """Qwen3-MoE without transformers 5: its tensors written here, the experts stacked as
    transformers 5 holds them (gate_up_proj (E, 2F, C), down_proj (E, C, F)), its config.json in
    transformers 5's form."""
    from safetensors.torch import save_file
    H, KV, D, C, E, F, Fd, L = 4, 2, 24, 64, 8, 32, 96, 3
    shapes = {"model.embed_tokens.weight": (257, C), "model.norm.weight": (C,),
              "lm_head.weight": (257, C)}
    for l in range(L):
        b = f"model.layers.{l}."
        shapes.update(layer_shapes(l, H, KV, D, C, Fd if l == 0 else None))
        if l > 0:
            shapes.update({b + "mlp.gate.weight": (E, C),
                           b + "mlp.experts.gate_up_proj": (E, 2 * F, C),
                           b + "mlp.experts.down_proj": (E, C, F)})
    tensors = {k: torch.zeros(s) for k, s in shapes.items()}
    randomize(sorted(tensors.items()), 12)
    widen_routers(tensors.items())
    os.makedirs(out, exist_ok=True)
    save_file(tensors, f"{out}/model.safetensors", metadata={"format": "pt"})
    c = dict(COMMON, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
             hidden_act="silu", head_dim=D, num_hidden_layers=L, intermediate_size=Fd,
             num_experts=E, moe_intermediate_size=F, mlp_only_layers=[0], decoder_sparse_step=1,
             norm_topk_prob=True, attention_bias=False, use_sliding_window=False, dtype="float32",
             rope_parameters={"rope_type": "default", "rope_theta": 20000.0})
    json.dump(c, open(f"{out}/config.json", "w"), indent=2)


def make(family, out):
    import transformers as tf
    if not hasattr(tf, CLASSES[family]) and family == "qwen3_moe":
        return make_qwen3_moe(out)
    model = getattr(tf, CLASSES[family])(config(family))
    randomize(model.named_parameters(), 11)
    widen_routers(model.named_parameters())
    shard = {"max_shard_size": "20KB"} if family == "qwen2_moe" else {}
    model.save_pretrained(out, **shard)  # safetensors: both versions' default


def expert(W, b, e, x):
    """Expert e of block b: stored apart (Qwen's or Mixtral's names) or stacked (transformers 5)."""
    if f"{b}mlp.experts.{e}.gate_proj.weight" in W:
        return dense_mlp(W, b, x, f"mlp.experts.{e}.")
    if f"{b}block_sparse_moe.experts.{e}.w1.weight" in W:
        p = f"{b}block_sparse_moe.experts.{e}."
        gate, up = x @ W[p + "w1.weight"].T, x @ W[p + "w3.weight"].T
        return (torch.nn.functional.silu(gate) * up) @ W[p + "w2.weight"].T
    gate, up = (x @ W[b + "mlp.experts.gate_up_proj"][e].T).chunk(2, -1)
    return (torch.nn.functional.silu(gate) * up) @ W[b + "mlp.experts.down_proj"][e].T


def moe_mlp(W, cfg, l, x):
    """transformers' sparse block, token by token: softmax over the experts, the top K, their
    weights renormalised (Mixtral, norm_topk_prob), plus Qwen2-MoE's gated shared expert."""
    b = f"model.layers.{l}."
    mixtral = cfg["model_type"] == "mixtral"
    step = cfg.get("decoder_sparse_step", 1)
    if cfg["model_type"] not in ("mixtral", "olmoe") and (l in cfg.get("mlp_only_layers", []) or (l + 1) % step != 0):
        return dense_mlp(W, b, x)
    router = W.get(b + "mlp.gate.weight", W.get(b + "block_sparse_moe.gate.weight"))
    probs = torch.softmax(x @ router.T, -1)
    weights, chosen = probs.topk(cfg["num_experts_per_tok"], -1)
    if mixtral or cfg.get("norm_topk_prob"):
        weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for w, e in zip(weights[t], chosen[t]):
            out[t] += w * expert(W, b, int(e), x[t:t + 1])[0]
    if b + "mlp.shared_expert_gate.weight" in W:
        gate = torch.sigmoid(x @ W[b + "mlp.shared_expert_gate.weight"].T)
        out += gate * dense_mlp(W, b, x, "mlp.shared_expert.")
    return out


def edit(folder, what):
    """Copies of a saved model (in one file) broken one way each, for hf_moe.sh's refusals."""
    from safetensors.torch import save_file
    w = load_weights(folder)
    out = f"{folder}-{what}"
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(f"{folder}/config.json"))
    if what == "missing":  # expert 3 of layer 1 lacks its up projection
        del w["model.layers.1.mlp.experts.3.up_proj.weight"]
    elif what == "duplicated":  # layer 2's experts both apart and stacked
        b = "model.layers.2.mlp.experts."
        w[b + "gate_up_proj"] = torch.stack(
            [torch.cat([w[f"{b}{e}.gate_proj.weight"], w[f"{b}{e}.up_proj.weight"]]) for e in
             range(8)])
        w[b + "down_proj"] = torch.stack([w[f"{b}{e}.down_proj.weight"] for e in range(8)])
    elif what == "extra":  # a ninth expert
        w["model.layers.1.mlp.experts.8.up_proj.weight"] = \
            w["model.layers.1.mlp.experts.0.up_proj.weight"].clone()
    elif what == "sigmoid":
        cfg["scoring_func"] = "sigmoid"
    elif what == "gqa":  # OLMoE with fewer key/value heads than heads
        cfg["num_key_value_heads"] = 2
    elif what == "no_router":  # Mixtral without layer 1's router
        del w["model.layers.1.block_sparse_moe.gate.weight"]
    elif what == "topk_over":  # more experts per token than experts
        cfg["num_experts_per_tok"] = cfg["num_local_experts"] + 1
    elif what == "sparse_step":  # layers 1 and 3 of 4: not the first k dense then every n-th
        cfg.update(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[])
    save_file({k: v.contiguous() for k, v in w.items()}, f"{out}/model.safetensors",
              metadata={"format": "pt"})
    json.dump(cfg, open(f"{out}/config.json", "w"), indent=2)


if __name__ == "__main__":
    if sys.argv[1] == "has":
        import transformers as tf
        sys.exit(0 if hasattr(tf, CLASSES[sys.argv[2]]) else 1)
    elif sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "edit":
        edit(sys.argv[2], sys.argv[3])
    else:
        check(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5],
              "--reference-only" in sys.argv, mlp=moe_mlp)
