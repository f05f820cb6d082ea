#!/usr/bin/env python3
"""The comparisons of one bench/gpu_vs_pytorch.sh invocation, and the records it appends.

  compare_runs.py RUNS [--record FILE --meta JSON]

RUNS holds one JSON line per run, as gpu_vs_pytorch.sh prints them: {"who": "trainer" or
"pytorch", "model": "124m", "B": 64, "gpus": 1, "result": {"tok_s", "mfu", "mem_gib", ...},
"gpu0": {"sm_mhz", "power_w"}}. Prints one JSON line per comparison:
  - per model and micro-batch where both sides ran on one GPU (the n-th trainer run against the
    n-th PyTorch run): "ratio_trainer_over_pytorch", and "ratio_per_sm_clock" (at the GPU's power
    limit each side runs at its own clock; the tokens/s ratio is about the square root of this);
  - for a model run at more than one micro-batch: each side's best against the other's,
    "ratio_of_bests" (the peer's fastest micro-batch is not always the trainer's);
  - for the trainer on several GPUs: "ratio_over_one_gpu", against its run on one GPU at the
    same micro-batch per GPU.
With --record FILE, appends one record per comparison to FILE (bench/results/README.md names
the fields), with the date, commit, hardware, command, ... of --meta.
"""
import json
import sys

MODELS = {"124m": "GPT-2 124M", "350m": "GPT-2 350M", "1.3b": "GPT 1.3B",
          "llama-1b": "Llama-3.2-1B", "qwen3-0.6b": "Qwen3-0.6B",
          "olmoe": "OLMoE-style MoE (3.6B, 0.64B active)",
          "mixtral": "Mixtral-style MoE (3.2B, 0.94B active)"}


def tok_s(run):
    return run["result"]["tok_s"]


def ok(run):
    return isinstance(run.get("result"), dict) and "tok_s" in run["result"]


def layout(gpus, args):
    """'1 GPU', or the parallel layout: 'dp2 ZeRO-1', 'tp2 dp2', ... from TRAINER_ARGS, with
    ' selective recompute' (any Model.recompute but none) after it."""
    recompute = ""
    if "Model.recompute=" in args:
        mode = args.split("Model.recompute=", 1)[1].split()[0]
        recompute = "" if mode == "none" else " %s recompute" % mode
    if gpus == 1:
        return "1 GPU" + recompute
    degree = {}
    for kind in ("tp", "pp"):
        key = "Distributed.%s_degree=" % kind
        degree[kind] = int(args.split(key, 1)[1].split()[0]) if key in args else 1
    dp = gpus // (degree["tp"] * degree["pp"])
    parts = ["%s%d" % (k, degree[k]) for k in ("tp", "pp") if degree[k] > 1]
    if dp > 1:
        parts.append("dp%d" % dp)
        if "zero_stage1=false" not in args:  # on in the GPU configs
            parts.append("ZeRO-1")
    return " ".join(parts) + recompute


def side(run, peer_name=None):
    """A run's figures as a record holds them."""
    r, gpu = run["result"], run.get("gpu0") or {}
    out = {"micro_batch": run["B"], "tokens_per_s": r["tok_s"], "mfu": r.get("mfu"),
           "memory_gib": r.get("mem_gib"), "sm_mhz": gpu.get("sm_mhz")}
    if gpu.get("used_gib") is not None:  # nvidia-smi's peak memory.used, alike for both sides
        out["gpu_memory_used_gib"] = gpu["used_gib"]
    if peer_name:
        out = {"name": peer_name, **out}
        if r.get("torch"):
            out["torch"] = r["torch"]
    return out


def comparisons(runs, trainer_args=""):
    """(lines to print, records without their metadata), in the order the runs came."""
    runs = [r for r in runs if ok(r)]
    one = [r for r in runs if r.get("gpus", 1) == 1]
    lines, records = [], []

    def record(model, trainer, base, base_name, kind, ratio, gpus=1):
        rec = {"model": MODELS.get(model, model), "gpus": gpus,
               "layout": layout(gpus, trainer.get("args", trainer_args)), **side(trainer),
               "peer": side(base, base_name), "ratio": ratio, "comparison": kind}
        if trainer.get("memory_planned"):
            rec["memory_planned"] = trainer["memory_planned"]
        records.append(rec)

    for model in dict.fromkeys(r["model"] for r in one):
        mine = [r for r in one if r["model"] == model]
        for b in dict.fromkeys(r["B"] for r in mine):
            ours = [r for r in mine if r["B"] == b and r["who"] == "trainer"]
            peers = [r for r in mine if r["B"] == b and r["who"] == "pytorch"]
            for a, p in zip(ours, peers):
                ratio = round(tok_s(a) / tok_s(p), 3)
                line = {"model": model, "B": b, "ratio_trainer_over_pytorch": ratio}
                ca, cp = (a.get("gpu0") or {}).get("sm_mhz"), (p.get("gpu0") or {}).get("sm_mhz")
                if ca and cp:
                    line["ratio_per_sm_clock"] = round(tok_s(a) / ca / (tok_s(p) / cp), 3)
                lines.append(line)
                record(model, a, p, "PyTorch", "same micro-batch", ratio)
        best = {who: max((r for r in mine if r["who"] == who), key=tok_s, default=None)
                for who in ("trainer", "pytorch")}
        if len({r["B"] for r in mine}) < 2 or None in best.values():
            continue
        t, p = best["trainer"], best["pytorch"]
        ratio = round(tok_s(t) / tok_s(p), 3)
        lines.append({"model": model, "trainer_best": {"tok_s": tok_s(t), "B": t["B"]},
                      "pytorch_best": {"tok_s": tok_s(p), "B": p["B"]}, "ratio_of_bests": ratio})
        record(model, t, p, "PyTorch", "best against best", ratio)
    for r in runs:
        if r["who"] != "trainer" or r.get("gpus", 1) == 1:
            continue
        base = [o for o in one if o["who"] == "trainer" and o["model"] == r["model"]
                and o["B"] == r["B"]]
        if base:
            ratio = round(tok_s(r) / tok_s(base[-1]), 3)
            lines.append({"model": r["model"], "B": r["B"], "gpus": r["gpus"],
                          "ratio_over_one_gpu": ratio})
            record(r["model"], r, base[-1], "the trainer on 1 GPU", "against one GPU", ratio,
                   r["gpus"])
    return lines, records


def with_meta(rec, meta):
    """The record in the order bench/results/README.md lists its fields."""
    gpus = rec.pop("gpus")
    out = {"date": meta.get("date"), "commit": meta.get("commit"),
           "hardware": "%dx %s" % (gpus, meta["gpu"]) if meta.get("gpu") else None,
           "model": rec.pop("model"), "layout": rec.pop("layout")}
    out.update(rec)
    if rec["peer"]["name"] == "PyTorch" and meta.get("peer"):
        out["peer"]["name"] = "PyTorch (%s)" % meta["peer"]
    for key in ("match_peer", "steps", "driver", "trainer_args", "command", "note"):
        if meta.get(key) not in (None, ""):
            out[key] = meta[key]
    # Figures a run did not give are left out (the commit stays: null says it is not known).
    out["peer"] = {k: v for k, v in out["peer"].items() if v is not None}
    return {k: v for k, v in out.items() if v is not None or k == "commit"}


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    runs = [json.loads(line) for line in open(argv[0]) if line.strip()]
    record_file, meta = None, {}
    args = argv[1:]
    while args:
        flag, value = args.pop(0), args.pop(0) if args else None
        if flag == "--record" and value:
            record_file = value
        elif flag == "--meta" and value:
            meta = json.loads(value)
        else:
            sys.exit(__doc__)
    lines, records = comparisons(runs, meta.get("trainer_args", ""))
    for line in lines:
        print(json.dumps(line))
    if record_file and records:
        with open(record_file, "a") as f:
            for rec in records:
                f.write(json.dumps(with_meta(rec, meta)) + "\n")
        print(json.dumps({"recorded": len(records), "file": record_file}))


if __name__ == "__main__":
    main(sys.argv[1:])
