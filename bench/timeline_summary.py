#!/usr/bin/env python3
"""Summarise a kernel timeline (bench/kernel_timeline.cpp) of a training run, step by step.

A step starts with the token embedding's forward kernel. For the steps after --skip, prints the
wall time per step, the time the GPU ran nothing (gaps between kernels, and which kernel each
large gap follows), the time by kind of work (the rows of docs/performance.md's "What a step is
made of" table), and the kernels by their summed time per step, as they ran under load.

  python3 bench/timeline_summary.py t.csv [--skip 4] [--first-kernel EmbeddingForwardKernel]
"""
import argparse
import collections
import csv
import re


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("void ", "", 1)
    depth, cut = 0, len(name)
    for i, c in enumerate(name):  # drop the argument list: the first "(" outside template <>
        depth += (c == "<") - (c == ">")
        if c == "(" and depth == 0:
            cut = i
            break
    return name[:cut][:90]


# Kinds of work, first match wins (kernel names as short() gives them, or "memset ...").
# A MoE layer's phases (issue: the step by router, dispatch, experts, combine): the router's scores,
# top-k, losses and their gradients (its small GEMM counts with the GEMMs); the dispatch, which
# gathers each token's rows into expert order (and in backward sums them back); the experts'
# grouped GEMMs (our sm90 kernels; the per-expert cuBLASLt route counts with the GEMMs) and
# SwiGLU (a dense MLP's SwiGLU too, where the model has both); the combine, which scatters the
# expert outputs back weighted by the routing (and its gradient: the weights' dot products).
KINDS = [
    ("MoE router (scores, top-k, aux and z losses)",
     re.compile(r"MoeRouter|MoeAux|MoeLosses|MoeScoreTotals")),
    ("MoE dispatch (rows gathered into expert order)", re.compile(r"MoeGatherRows")),
    ("MoE experts: grouped GEMMs", re.compile(r"GroupedGemm|GroupedWeightGradient")),
    ("SwiGLU forward and backward", re.compile(r"SwiGlu")),
    ("MoE combine (weighted scatter back, weight gradients)",
     re.compile(r"MoeScatterRows|MoeSlotDots")),
    ("attention (cuDNN, or our fallback kernels)",
     re.compile(r"sdpa|dot_do_o|convert_dq|Attention\w*FallbackKernel")),
    ("GEMMs (cuBLASLt, cuDNN matmul graphs)", re.compile(r"nvjet|gemm|matMul|cutlass", re.I)),
    ("LayerNorm / RMSNorm forward and backward", re.compile(r"LayerNorm|RmsNorm")),
    ("cross-entropy", re.compile(r"CrossEntropy\w*Kernel")),
    ("bias gradients (column sums)", re.compile(r"ColumnSums")),
    ("AdamW and the gradient norm", re.compile(r"AdamW|SumPartialKernel<true>")),
]
OTHER = "embedding, partial sums, elementwise, memsets"


def kind_of(name):
    return next((label for label, pattern in KINDS if pattern.search(name)), OTHER)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=4, help="warm-up steps left out")
    ap.add_argument("--first-kernel", default="EmbeddingForwardKernel")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--gap-us", type=float, default=5.0, help="gaps listed when at least this")
    args = ap.parse_args()
    rows = []
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            if r["kind"] in ("kernel", "memset"):
                rows.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]))
    rows.sort()
    starts = [i for i, r in enumerate(rows) if r[2] == "kernel" and args.first_kernel in r[3]]
    steps = [(starts[i], starts[i + 1]) for i in range(args.skip, len(starts) - 1)]
    if not steps:
        raise SystemExit(f"fewer than {args.skip + 2} steps in {args.csv}")
    by_name = collections.defaultdict(float)
    gap_after = collections.defaultdict(lambda: [0.0, 0])
    wall = busy = 0.0
    launches = 0
    for a, b in steps:
        t0, t1 = rows[a][0], rows[b][0]
        wall += t1 - t0
        end = t0
        prev = "(step start)"
        for s, e, kind, name in rows[a:b]:
            by_name[(kind, short(name))] += e - s
            launches += 1
            if s > end:
                gap = s - end
                if gap >= args.gap_us * 1e3:
                    gap_after[prev][0] += gap
                    gap_after[prev][1] += 1
            busy += max(0, e - max(s, end))
            end = max(end, e)
            prev = short(name)
        if t1 - end >= args.gap_us * 1e3:  # the gap up to the next step's first kernel
            gap_after[prev][0] += t1 - end
            gap_after[prev][1] += 1
    n = len(steps)
    print(f"{n} steps: {wall / n / 1e6:.3f} ms per step, GPU busy {busy / n / 1e6:.3f} ms "
          f"({100 * busy / wall:.2f}%), idle {(wall - busy) / n / 1e6:.3f} ms, "
          f"{launches / n:.0f} kernels and memsets per step")
    print(f"\ngaps of {args.gap_us} us or more, by the kernel before them (per step):")
    for name, (t, c) in sorted(gap_after.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"  {t / n / 1e3:9.1f} us  {c / n:5.1f}x  {name}")
    by_kind = collections.defaultdict(float)
    for (kind, name), t in by_name.items():
        by_kind[kind_of(name if kind == "kernel" else "memset " + name)] += t
    print("\nby kind of work, per step:")
    for label, t in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {t / n / 1e6:8.3f} ms {100 * t / wall:5.1f}%  {label}")
    idle = wall - busy
    print(f"  {idle / n / 1e6:8.3f} ms {100 * idle / wall:5.1f}%  GPU idle between kernels")
    print("\nkernels by time per step, under load:")
    for (kind, name), t in sorted(by_name.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {t / n / 1e6:8.3f} ms {100 * t / wall:5.1f}%  {kind:6s} {name}")


if __name__ == "__main__":
    main()
