"""Reads the trainer's metrics.jsonl for the bench scripts (gpu_vs_pytorch.sh, scaling.sh).

  metrics.py summary FILE [AFTER_STEP]
      {"tok_s", "mfu", "mem_gib", "loss"}: the medians of tokens/s and MFU over the records after
      AFTER_STEP (default 10: warm-up, graph builds, GEMM tuning), the largest memory, the last loss.
  metrics.py compare RUN REF EACH MEAN STEPS [FIELD]
      {"steps", "worst", "mean", "pass"}: RUN's loss (or FIELD, e.g. grad_norm) at each of its
      steps against REF's at the same step, as relative differences; passes when RUN logged STEPS
      steps that REF also logged, the worst difference is at most EACH and their mean at most MEAN.
"""
import json
import statistics
import sys


def records(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if "step" in r and "loss" in r]


def summary(path, after_step=10):
    rows = [r for r in records(path) if r["step"] > after_step and "tokens_per_s" in r]
    if not rows:
        return {"error": "no training records after step %d in %s" % (after_step, path)}
    return {"tok_s": round(statistics.median(r["tokens_per_s"] for r in rows)),
            "mfu": round(statistics.median(r["mfu"] for r in rows), 4),
            "mem_gib": round(max(r["memory_gib"] for r in rows), 2),
            "loss": rows[-1]["loss"]}


def compare(run_path, ref_path, each, mean, steps, field="loss"):
    ref = {r["step"]: r[field] for r in records(ref_path)}
    diffs = [abs(r[field] - ref[r["step"]]) / abs(ref[r["step"]])
             for r in records(run_path) if r["step"] in ref]
    if not diffs:
        return {"steps": 0, "worst": None, "mean": None, "pass": False}
    worst, average = max(diffs), sum(diffs) / len(diffs)
    return {"steps": len(diffs), "worst": float("%.3g" % worst), "mean": float("%.3g" % average),
            "pass": len(diffs) == steps and worst <= each and average <= mean}


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "summary":
        result = summary(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 10)
    elif len(sys.argv) in (7, 8) and sys.argv[1] == "compare":
        result = compare(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]),
                         int(sys.argv[6]), *sys.argv[7:])
    else:
        sys.exit(__doc__)
    print(json.dumps(result))
