#!/usr/bin/env python3
"""The PyTorch baseline that bench/llama_vs_pytorch.sh and bench/moe_vs_pytorch.sh measure the
trainer against: the llama family (Llama-3, Qwen3) and its mixture-of-experts form.

The decoder as the trainer computes it (docs/llama.md): RMSNorm (statistics in fp32), RoPE
(rotate-half, base theta, optionally Llama-3's frequency scaling), grouped-query attention through
scaled_dot_product_attention (causal), optional per-head q/k RMSNorm (Qwen3), a SwiGLU MLP, tied
or untied embeddings, no biases. With E > 0 every layer's MLP is a dropless mixture of experts
(docs/moe.md): an fp32 router, softmax then top-K ("pre_softmax": true, OLMoE) or the top-K logits
then a softmax over those (false, Mixtral), the tokens grouped by expert and each expert's SwiGLU
run over its group (torch._grouped_mm where the installed torch has it, on CUDA; a loop over the
experts otherwise), the switch load-balancing loss aux * E / (K n^2) * sum_e P_e c_e, and an
optional shared expert of width SE scaled by sigmoid(x . w) (Qwen2-MoE). Weights N(0, 0.02).

It trains the way the bench scripts make the trainer train (bench/peer_common.sh): AdamW at lr
3e-4 from the first step, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on the matrices and
embeddings, gradients clipped at norm 1.0, fused AdamW, bf16 autocast over fp32 master weights,
torch.compile, on 8 batches of uniformly random token ids (seeded) that it repeats. Without CUDA
it runs on the CPU in fp32 (no autocast, no fused AdamW), for tests with tiny shapes.

Usage:
  python3 bench/torch_llama.py '[{"V": 128256, "T": 2048, "L": 16, "D": 2048, "H": 32, "KV": 8,
                                  "F": 8192, "tie": true, "theta": 500000,
                                  "rope_scaling": "llama3", "B": 4}]'
The argument is a JSON config or a list of them; keys: V (vocabulary, padded as the trainer pads
it), T, L, D (model width), H (query heads), KV (key/value heads; H), HD (head width; D / H),
F (SwiGLU width), tie (false), theta (10000), rope_scaling ("none" | "llama3", with rope_factor
32, rope_low 1, rope_high 4, rope_original 8192), eps (1e-5), qk_norm (false); E (experts; 0),
K (top-K), EF (expert width), aux (0), SE (shared expert width; 0), pre_softmax (true),
norm_topk (false); B, compile (true), steps (30), warmup (10), window (10), vocab (the ids
drawn; V), device ("cuda" when there is one, else "cpu").

Prints one JSON line per config: the config, "params", "active_params" (the parameters a token's
FLOPs count, as the trainer's: of the experts K of E, plus the router; the input embedding only
when tied), "tok_s" (the median of the window-step windows after the first warmup steps,
each timed between two synchronisations, as the trainer's metrics are), "step_ms", "mfu"
((6 active_params + 12 L H HD T) FLOPs per token against 989 TFLOP/s, the dense bf16 peak of an
H100/H200 SXM, as the trainer counts it), "mem_gib" (PyTorch's peak allocated memory),
"reserved_gib", "loss" (the last step's cross-entropy), "loss_first" (the first step's),
"aux_loss", "torch" and "gpu". A config that fails prints its config with "error".
"""
import contextlib
import json
import math
import statistics
import sys
import time

from torch_gpt import PEAK_FLOPS, run_all  # bench/ beside this script
DEFAULTS = dict(tie=False, theta=10000.0, rope_scaling="none", rope_factor=32.0, rope_low=1.0,
                rope_high=4.0, rope_original=8192, eps=1e-5, qk_norm=False, E=0, K=0, EF=0,
                aux=0.0, SE=0, pre_softmax=True, norm_topk=False, compile=True, steps=30,
                warmup=10, window=10)
REQUIRED = ("V", "T", "L", "D", "H", "B")


def parse(argv):
    """The configs from the command line; raises ValueError on a bad argument."""
    configs = []
    for a in argv:
        if not a.lstrip().startswith(("[", "{")):
            raise ValueError("unknown argument %r (a JSON config or a list of them)" % a)
        given = json.loads(a)
        configs += given if isinstance(given, list) else [given]
    for c in configs:
        missing = [k for k in REQUIRED if k not in c]
        if missing:
            raise ValueError("config %s lacks %s" % (json.dumps(c), ", ".join(missing)))
        for k, v in DEFAULTS.items():
            c.setdefault(k, v)
        c.setdefault("KV", c["H"])
        c.setdefault("HD", c["D"] // c["H"])
        c.setdefault("vocab", c["V"])
        if c["E"] == 0:
            c.setdefault("F", 4 * c["D"])
        elif not 0 < c["K"] <= c["E"] or c["EF"] <= 0:
            raise ValueError("E=%d needs 0 < K <= E and EF > 0 (K=%d, EF=%d)"
                             % (c["E"], c["K"], c["EF"]))
        if c["H"] % c["KV"]:
            raise ValueError("H=%d is not a multiple of KV=%d" % (c["H"], c["KV"]))
        if c["steps"] < c["warmup"] + c["window"]:
            raise ValueError("steps=%d: at least warmup + window = %d"
                             % (c["steps"], c["warmup"] + c["window"]))
    return configs


def rope_frequencies(c):
    """(HD / 2,) inverse frequencies, with Llama-3's scaling when the config has it."""
    hd = c["HD"]
    inv = [c["theta"] ** (-2.0 * i / hd) for i in range(hd // 2)]
    if c["rope_scaling"] == "llama3":
        low_wavelen = c["rope_original"] / c["rope_low"]
        high_wavelen = c["rope_original"] / c["rope_high"]
        scaled = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                scaled.append(f)
            elif wavelen > low_wavelen:
                scaled.append(f / c["rope_factor"])
            else:
                smooth = ((c["rope_original"] / wavelen - c["rope_low"])
                          / (c["rope_high"] - c["rope_low"]))
                scaled.append((1 - smooth) * f / c["rope_factor"] + smooth * f)
        inv = scaled
    elif c["rope_scaling"] != "none":
        raise ValueError("rope_scaling %r: none or llama3" % c["rope_scaling"])
    return inv


def torch_at_least(torch, major, minor):
    parts = torch.__version__.split(".")
    return (int(parts[0]), int(parts[1])) >= (major, minor)


def build(c, torch):
    import torch.nn as nn
    import torch.nn.functional as F

    gqa_sdpa = torch_at_least(torch, 2, 5)  # enable_gqa: no repeated k/v
    grouped_mm = hasattr(torch, "_grouped_mm")

    def rms_norm(x, w, eps):  # statistics in fp32, as the trainer
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return y.to(x.dtype) * w.to(x.dtype)

    class RmsNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x):
            return rms_norm(x, self.weight, c["eps"])

    def rotate(x, cos, sin):  # (B, h, T, HD), rotate-half
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)

    def attention(q, k, v):  # (B, H, T, HD), (B, KV, T, HD) x 2
        if hasattr(F, "scaled_dot_product_attention"):
            if gqa_sdpa:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        rep = q.shape[1] // k.shape[1]  # torch < 2.0 (the CPU tests): the same in plain ops
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        t = q.shape[2]
        s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
        return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            d, h, kv, hd = c["D"], c["H"], c["KV"], c["HD"]
            self.q_proj = nn.Linear(d, h * hd, bias=False)
            self.k_proj = nn.Linear(d, kv * hd, bias=False)
            self.v_proj = nn.Linear(d, kv * hd, bias=False)
            self.o_proj = nn.Linear(h * hd, d, bias=False)
            self.q_norm = RmsNorm(hd) if c["qk_norm"] else None
            self.k_norm = RmsNorm(hd) if c["qk_norm"] else None

        def forward(self, x, cos, sin):  # x (B, T, D)
            b, t, _ = x.shape
            hd = c["HD"]
            q = self.q_proj(x).view(b, t, c["H"], hd)
            k = self.k_proj(x).view(b, t, c["KV"], hd)
            v = self.v_proj(x).view(b, t, c["KV"], hd).transpose(1, 2)
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            q, k = rotate(q.transpose(1, 2), cos, sin), rotate(k.transpose(1, 2), cos, sin)
            y = attention(q, k.to(q.dtype), v.to(q.dtype))  # (B, H, T, HD)
            return self.o_proj(y.transpose(1, 2).reshape(b, t, c["H"] * hd))

    class SwiGlu(nn.Module):
        def __init__(self, f):
            super().__init__()
            self.gate_proj = nn.Linear(c["D"], f, bias=False)
            self.up_proj = nn.Linear(c["D"], f, bias=False)
            self.down_proj = nn.Linear(f, c["D"], bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Moe(nn.Module):
        """Dropless top-K mixture of experts over the (N, D) tokens; returns (out, aux loss)."""

        def __init__(self):
            super().__init__()
            e, d, f = c["E"], c["D"], c["EF"]
            self.router = nn.Parameter(torch.empty(e, d))
            self.gate_up = nn.Parameter(torch.empty(e, d, 2 * f))  # x @ gate_up[e]: gate | up
            self.down = nn.Parameter(torch.empty(e, f, d))
            self.shared = SwiGlu(c["SE"]) if c["SE"] > 0 else None
            self.shared_gate = nn.Parameter(torch.empty(1, d)) if c["SE"] > 0 else None

        def experts(self, xs, counts, weights):  # xs (N K, D) grouped by expert, counts (E,)
            w1, w2 = self.gate_up.to(xs.dtype), self.down.to(xs.dtype)  # (E, D, 2 EF), (E, EF, D)
            if grouped_mm and xs.is_cuda:
                offs = torch.cumsum(counts, 0).to(torch.int32)
                h = torch._grouped_mm(xs, w1, offs=offs)
                g, u = h.chunk(2, dim=-1)
                return torch._grouped_mm(F.silu(g) * u, w2, offs=offs) * weights
            out, start = [], 0
            for e, n in enumerate(counts.tolist()):
                g, u = (xs[start:start + n] @ w1[e]).chunk(2, dim=-1)
                out.append((F.silu(g) * u) @ w2[e])
                start += n
            return torch.cat(out) * weights

        def forward(self, x):  # (N, D)
            n, k, e = x.shape[0], c["K"], c["E"]
            fp32 = torch.autocast("cuda", enabled=False) if x.is_cuda else contextlib.nullcontext()
            with fp32:  # the router in fp32, as the trainer's
                logits = x.float() @ self.router.float().t()  # (N, E)
                probs = torch.softmax(logits, dim=-1)
                if c["pre_softmax"]:
                    weights, chosen = probs.topk(k, dim=-1)
                else:
                    top, chosen = logits.topk(k, dim=-1)
                    weights = torch.softmax(top, dim=-1)
                if c["norm_topk"]:
                    weights = weights / weights.sum(-1, keepdim=True)
                flat = chosen.reshape(-1)  # (N K,) token-major
                counts = torch.zeros(e, dtype=torch.long, device=x.device)  # tokens per expert
                counts.scatter_add_(0, flat, torch.ones_like(flat))
                aux = c["aux"] * e / (k * n * n) * (probs.sum(0) * counts.float()).sum()
            order = torch.sort(flat, stable=True).indices
            token = order // k
            xc = x.to(torch.bfloat16) if x.is_cuda else x  # the experts in bf16 on CUDA
            xs = xc[token]  # (N K, D) grouped by expert
            ys = self.experts(xs, counts, weights.reshape(-1)[order, None].to(xc.dtype))
            out = torch.zeros_like(xc).index_add_(0, token, ys.to(xc.dtype))
            if self.shared is not None:
                out = out + torch.sigmoid(x @ self.shared_gate.to(x.dtype).t()) * self.shared(x)
            return out, aux

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_norm, self.attn = RmsNorm(c["D"]), Attention()
            self.post_attn_norm = RmsNorm(c["D"])
            self.mlp = Moe() if c["E"] > 0 else SwiGlu(c["F"])

        def forward(self, x, cos, sin):
            x = x + self.attn(self.input_norm(x), cos, sin)
            h = self.post_attn_norm(x)
            if c["E"] == 0:
                return x + self.mlp(h), None
            y, aux = self.mlp(h.reshape(-1, h.shape[-1]))
            return x + y.view_as(h), aux

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(c["V"], c["D"])
            self.layers = nn.ModuleList(Block() for _ in range(c["L"]))
            self.norm = RmsNorm(c["D"])
            self.lm_head = nn.Linear(c["D"], c["V"], bias=False)
            if c["tie"]:
                self.lm_head.weight = self.embed.weight
            inv = torch.tensor(rope_frequencies(c), dtype=torch.float64)
            angles = torch.outer(torch.arange(c["T"], dtype=torch.float64), inv)
            angles = torch.cat((angles, angles), dim=-1)  # (T, HD)
            self.register_buffer("cos", angles.cos().float(), persistent=False)
            self.register_buffer("sin", angles.sin().float(), persistent=False)
            for p in self.parameters():  # the trainer's initialisation: N(0, 0.02), norms 1
                if p.dim() >= 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):  # (B, T) x 2 -> (cross-entropy, aux loss)
            x = self.embed(idx)
            aux = torch.zeros((), device=idx.device)
            for block in self.layers:
                x, a = block(x, self.cos, self.sin)
                if a is not None:
                    aux = aux + a
            logits = self.lm_head(self.norm(x))
            ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))  # fp32
            return ce, aux

    return Llama()


def counts(model, c):
    """(params, active params, FLOPs per token) as the trainer counts them (ActiveParameters in
    src/model/model_spec.cpp): of the experts K of E; the input embedding, a lookup, only when
    tied to the LM head."""
    n = sum(p.numel() for p in model.parameters())  # a tied weight once
    active = n - (0 if c["tie"] else c["V"] * c["D"])
    if c["E"] > 0:
        experts = c["L"] * c["E"] * 3 * c["D"] * c["EF"]
        active -= experts - experts * c["K"] // c["E"]
    return n, active, 6 * active + 12 * c["L"] * c["H"] * c["HD"] * c["T"]


def run(c):
    import torch

    dev = c.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = dev == "cuda"
    torch.manual_seed(0)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = build(c, torch).to(dev)
    n_params, n_active, flops = counts(model, c)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                                  **({"fused": True} if cuda else {}))
    step = torch.compile(model) if c["compile"] else model
    g = torch.Generator(device=dev).manual_seed(0)
    data = torch.randint(0, c["vocab"], (8, c["B"], c["T"] + 1), device=dev, generator=g)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    def autocast():  # bf16 on CUDA; fp32 on the CPU, as the trainer's CPU path
        return torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    warmup, window = c["warmup"], c["window"]
    windows, losses, aux, start = [], [], None, None
    for i in range(c["steps"]):
        if i >= warmup and (i - warmup) % window == 0:
            sync()
            if start is not None:
                windows.append(window * c["B"] * c["T"] / (time.perf_counter() - start))
            start = time.perf_counter()
        batch = data[i % 8]
        with autocast():
            ce, aux = step(batch[:, :-1], batch[:, 1:])
        (ce + aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i == 0 or i == c["steps"] - 1:
            losses.append(ce.item())
    sync()
    if (c["steps"] - warmup) % window == 0:
        windows.append(window * c["B"] * c["T"] / (time.perf_counter() - start))
    tok_s = statistics.median(windows)
    result = dict(c, device=dev, params=n_params, active_params=n_active, tok_s=round(tok_s),
                  step_ms=round(1e3 * c["B"] * c["T"] / tok_s, 2),
                  mfu=round(tok_s * flops / PEAK_FLOPS, 6),
                  mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
                  reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2) if cuda else None,
                  loss=round(losses[-1], 4), loss_first=round(losses[0], 4),
                  aux_loss=round(aux.item(), 6), torch=torch.__version__,
                  gpu=torch.cuda.get_device_name() if cuda else None)
    del model, optimizer, step
    if cuda:
        torch.cuda.empty_cache()
    return result


def main(argv):
    try:
        configs = parse(argv)
    except (ValueError, json.JSONDecodeError) as e:
        sys.exit("torch_llama.py: %s\n\n%s" % (e, __doc__))
    if not configs:
        sys.exit(__doc__)
    run_all(configs, run)


if __name__ == "__main__":
    main(sys.argv[1:])
