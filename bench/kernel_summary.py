#!/usr/bin/env python3
"""Sums one training step of an ncu CSV (bench/kernel_profile.sh) by kernel.

The step is the profile's first: from its start (bench/kernel_profile.sh starts profiling at a
step boundary) to the end of the first step's AdamW launches. Prints the kernel
count, the sum of the kernel times, and each kernel name's total, count and share. With
--moe-phases, also the step's mixture-of-experts time by phase, from the launch order (moe.cu's
kernels bracket the phases): router (the router GEMM before MoeRouterForward, the router kernels,
and the router's backward GEMMs after MoeRouterBackward), dispatch (MoeScatterRows), experts
(every kernel after a MoeScatterRows until the next MoE kernel: the experts' GEMMs and SwiGLU,
forward and backward, the shared expert's included) and combine (MoeGatherRows, MoeSlotDots).

    python3 bench/kernel_summary.py ncu.csv [--sequence FIRST LAST] [--moe-phases]
"""
import argparse
import collections
import csv
import re


def short_name(name):
    name = name.replace("void ", "").replace("trainer::", "")
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    return re.sub(r"\(.*", "", name)[:80]


def print_moe_phases(step, total):
    phases = collections.defaultdict(float)
    state = None  # "experts" after a scatter, "router" after the router's backward
    for i, (name, t) in enumerate(step):
        if name.startswith("MoeRouterForward"):
            phases["router"] += t
            if i > 0 and not step[i - 1][0].startswith("Moe"):  # the router's logits GEMM
                phases["router"] += step[i - 1][1]
                phases[state or "other"] -= step[i - 1][1]
            state = None
        elif name.startswith("MoeRouterBackward"):
            phases["router"] += t
            state = "router"
        elif name.startswith("MoeScatterRows"):
            phases["dispatch"] += t
            state = "experts"
        elif name.startswith("MoeGatherRows") or name.startswith("MoeSlotDots"):
            phases["combine"] += t
            state = None
        else:
            phases[state or "other"] += t
    for phase in ("router", "dispatch", "experts", "combine", "other"):
        print(f"moe phase {phase:8s} {phases[phase]:8.3f} ms {100 * phases[phase] / total:5.1f}%")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--sequence", nargs=2, type=int, metavar=("FIRST", "LAST"),
                        help="also list kernels FIRST..LAST of the step in launch order")
    parser.add_argument("--moe-phases", action="store_true",
                        help="also sum the MoE layers' kernels by phase")
    args = parser.parse_args()
    rows = [r for r in csv.reader(open(args.csv)) if len(r) > 10]
    column = {h: i for i, h in enumerate(rows[0])}
    kernels = [(short_name(r[column["Kernel Name"]]),
                float(r[column["Metric Value"]].replace(",", "")) / 1e6)
               for r in rows[1:] if r[column["Metric Name"]] == "gpu__time_duration.sum"]
    adam = [i for i, (name, _) in enumerate(kernels) if name.startswith("AdamW")]
    # AdamW is two launches per step (decay and no-decay spans). The profile starts at a step
    # boundary (bench/kernel_profile.sh), so its first step ends with the first pair.
    ends = [-1] + [i for i in adam if i + 1 not in adam]
    if len(ends) < 2:
        raise SystemExit("no optimizer step in the profile")
    step = kernels[ends[0] + 1:ends[1] + 1]
    total = sum(t for _, t in step)
    print(f"one step: {len(step)} kernels, {total:.2f} ms of kernel time")
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for name, t in step:
        by_name[name][0] += 1
        by_name[name][1] += t
    for name, (count, t) in sorted(by_name.items(), key=lambda item: -item[1][1]):
        print(f"{t:8.3f} ms {100 * t / total:5.1f}% {count:4d}x  {name}")
    if args.moe_phases:
        print_moe_phases(step, total)
    if args.sequence:
        first, last = args.sequence
        for name, t in step[first:last]:
            print(f"{t * 1e3:8.1f} us  {name}")


if __name__ == "__main__":
    main()
