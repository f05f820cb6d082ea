#!/usr/bin/env python3
"""The PyTorch baseline that bench/gpu_vs_pytorch.sh measures the trainer against.

The same GPT-2 as the trainer's configs (learned positions, pre-LayerNorm blocks, a tanh-GELU MLP
of 4C, the LM head tied to the token embedding, the vocabulary padded to a multiple of 128), the
way one would train it in PyTorch: bf16 autocast, scaled_dot_product_attention (causal),
torch.compile, fused AdamW. It trains the way bench/gpu_vs_pytorch.sh makes the trainer train:
AdamW at lr 3e-4 from the first step, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on the matrices
and embeddings (as the trainer), gradients clipped at norm 1.0, on 8 batches of uniformly random
token ids that it repeats. The loss is taken over all padded logits, as nanoGPT does (the trainer
masks the padding columns); it costs nothing either way.

Usage:
  python3 bench/torch_gpt.py [--steps N] [--no-compile] [--dry-run] MODEL:B [MODEL:B ...]
  python3 bench/torch_gpt.py '[{"V": 50304, "T": 1024, "L": 12, "H": 12, "D": 768, "B": 64,
                                "compile": true, "steps": 30}]'
MODEL is 124m, 350m or 1.3b (the shapes of configs/gpt2-124m.yaml, gpt2-350m.yaml and
gpt-1.3b.yaml) and B the micro-batch. The JSON form (a list of configs, or one) is what
bench/gpu_vs_pytorch.sh passes; its keys: V (padded vocabulary), T, L, H, D (model width), B,
and optionally compile (true), steps (30), vocab (the ids drawn: 50257 for V = 50304, else V).

Prints one JSON line per config: the config, "params", "tok_s" (the median of the 10-step
windows after the first 10 steps, each window timed between two synchronisations, as the
trainer's metrics are), "step_ms", "mfu" ((6 N + 12 L D T) FLOPs per token against 989 TFLOP/s,
the dense bf16 peak of an H100/H200 SXM, as the trainer counts it), "mem_gib" (PyTorch's peak
allocated memory), "reserved_gib" (its peak reserved memory), "loss", "torch" and "gpu". A config
that fails prints its config with "error".
"""
import json
import math
import statistics
import sys
import time

MODELS = {  # the trainer's configs: vocabulary 50257 padded to 50304
    "124m": dict(V=50304, T=1024, L=12, H=12, D=768),
    "350m": dict(V=50304, T=1024, L=24, H=16, D=1024),
    "1.3b": dict(V=50304, T=2048, L=24, H=16, D=2048),
}
PEAK_FLOPS = 989e12
WARMUP_STEPS = 10
WINDOW = 10


def parse(argv):
    """(configs, dry_run) from the command line; raises ValueError on a bad argument."""
    steps, compile_, dry_run, configs = 30, True, False, []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--steps":
            steps = int(args.pop(0))
        elif a == "--no-compile":
            compile_ = False
        elif a == "--dry-run":
            dry_run = True
        elif a.lstrip().startswith(("[", "{")):
            given = json.loads(a)
            configs += given if isinstance(given, list) else [given]
        elif ":" in a and a.split(":")[0] in MODELS:
            name, b = a.split(":", 1)
            configs.append(dict(MODELS[name], B=int(b), model=name))
        else:
            raise ValueError("unknown argument %r (MODEL:B with MODEL one of %s, or JSON)"
                             % (a, ", ".join(MODELS)))
    for c in configs:
        c.setdefault("compile", compile_)
        c.setdefault("steps", steps)
        c.setdefault("vocab", 50257 if c["V"] == 50304 else c["V"])
        if c["steps"] < WARMUP_STEPS + WINDOW:
            raise ValueError("steps=%d: at least %d (warm-up, then one timed window)"
                             % (c["steps"], WARMUP_STEPS + WINDOW))
    return configs, dry_run


def flops_per_token(n_params, c):
    return 6 * n_params + 12 * c["L"] * c["D"] * c["T"]


def build(c):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, d))

    class Mlp(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.c_fc = nn.Linear(d, 4 * d)
            self.c_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(d), Attention(d, heads)
            self.ln_2, self.mlp = nn.LayerNorm(d), Mlp(d)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Gpt(nn.Module):  # parameter names as the trainer's checkpoints (nanoGPT's)
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(c["V"], c["D"])
            self.wpe = nn.Embedding(c["T"], c["D"])
            self.h = nn.ModuleList(Block(c["D"], c["H"]) for _ in range(c["L"]))
            self.ln_f = nn.LayerNorm(c["D"])
            self.lm_head = nn.Linear(c["D"], c["V"], bias=False)
            self.lm_head.weight = self.wte.weight  # tied
            # The trainer's initialisation: N(0, 0.02), the two residual projections
            # N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm weights 1.
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    layernorm_weight = ".ln_" in "." + name and name.endswith(".weight")
                    nn.init.ones_(p) if layernorm_weight else nn.init.zeros_(p)
                else:
                    std = 0.02 / math.sqrt(2 * c["L"]) if name.endswith("c_proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

    return Gpt()


def run(c):
    import torch

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = build(c).cuda()
    n_params = sum(p.numel() for p in model.parameters())  # the tied weight once
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.999), eps=1e-8, fused=True)
    step = torch.compile(model) if c["compile"] else model
    g = torch.Generator(device="cuda").manual_seed(0)
    data = torch.randint(0, c["vocab"], (8, c["B"], c["T"] + 1), device="cuda", generator=g)
    torch.cuda.reset_peak_memory_stats()
    windows, loss, start = [], None, None
    for i in range(c["steps"]):
        if i >= WARMUP_STEPS and (i - WARMUP_STEPS) % WINDOW == 0:
            torch.cuda.synchronize()
            if start is not None:
                windows.append(WINDOW * c["B"] * c["T"] / (time.perf_counter() - start))
            start = time.perf_counter()
        batch = data[i % 8]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if (c["steps"] - WARMUP_STEPS) % WINDOW == 0:
        windows.append(WINDOW * c["B"] * c["T"] / (time.perf_counter() - start))
    tok_s = statistics.median(windows)
    result = dict(c, params=n_params, tok_s=round(tok_s),
                  step_ms=round(1e3 * c["B"] * c["T"] / tok_s, 2),
                  mfu=round(tok_s * flops_per_token(n_params, c) / PEAK_FLOPS, 4),
                  mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                  reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2),
                  loss=round(loss.item(), 4), torch=torch.__version__,
                  gpu=torch.cuda.get_device_name())
    del model, optimizer, step
    torch.cuda.empty_cache()
    return result


def main(argv):
    try:
        configs, dry_run = parse(argv)
    except (ValueError, IndexError, json.JSONDecodeError) as e:
        sys.exit("torch_gpt.py: %s\n\n%s" % (e, __doc__))
    if not configs:
        sys.exit(__doc__)
    if dry_run:
        for c in configs:
            print(json.dumps(c), flush=True)
    else:
        run_all(configs, run)


def run_all(configs, run):
    """Prints run(c)'s JSON line for each config (torch_llama.py's too); a config that fails (e.g.
    out of memory) prints its config with "error" and does not stop the rest."""
    for c in configs:
        try:
            print(json.dumps(run(c)), flush=True)
        except Exception as e:
            print(json.dumps(dict(c, error=str(e)[:300])), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
