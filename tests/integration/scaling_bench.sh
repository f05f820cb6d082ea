#!/usr/bin/env bash
# bench/scaling.sh (the scaling runs of issue 7) in miniature: the tiny model on 4 CPU ranks.
#  - tp2-dp2, pp2-dp2 and tp2-pp2 follow the one-rank loss curve on the same global batch, the
#    checkpoint saved on tp2-pp2 resumes on dp4 and on one rank along the uninterrupted curve, and
#    DP scaling reports 1, 2 and 4 ranks against the one-rank figure;
#  - a "layout" that trains another model (a learning rate ten times larger) fails its check, and
#    the script exits 1;
#  - a second call on the same results folder runs nothing again;
#  - the token stream it writes is learnable: in 8 steps (still in warmup) the one-rank loss falls
#    0.3 below ln(257), where uniform random tokens would keep it.
#   scaling_bench.sh TRAINER SOURCE_DIR SCRATCH
source "$(dirname "$0")/lib.sh"
rc=0
OUT=$SCRATCH/out NP=4 STEPS=8 SCALING_STEPS=16 DEVICE=cpu TOKENS=200000 MPIEXEC=$MPIEXEC MPI_ARGS="--oversubscribe --bind-to none" \
  LAYOUTS="tp2-dp2 pp2-dp2 tp2-pp2 dp4-other-lr:Optimizer.lr=3e-2,Optimizer.warmup_steps=1" \
  bash "$SRC/bench/scaling.sh" "$TRAINER" tiny:2 > out.log 2> err.log || rc=$?
cat out.log
[ "$rc" = 1 ] || { cat err.log; fail "scaling.sh exited $rc, expected 1 (one check fails)"; }
python3 - out/results.jsonl <<'PY'
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
errors = [l for l in lines if "error" in l]
assert not errors, errors
checks = {l["run"]: l["result"] for l in lines if l.get("check") in ("layout", "resume")}
expect_pass = ["tiny-tp2-dp2", "tiny-pp2-dp2", "tiny-tp2-pp2", "tiny-resume-dp4", "tiny-resume-gpu1"]
for run in expect_pass:
    assert checks[run]["pass"], (run, checks[run])
    assert checks[run]["steps"] == (4 if "resume" in run else 8), (run, checks[run])
    assert checks[run]["worst"] < 1e-3, (run, checks[run])  # fp32 on CPU ranks: rounding only
other = checks["tiny-dp4-other-lr"]
assert not other["pass"] and other["worst"] > 0.05, other
scaling = {l["gpus"]: l for l in lines if l.get("check") == "dp_scaling"}
assert sorted(scaling) == [1, 2, 4], scaling
assert scaling[1]["efficiency"] == 1.0, scaling[1]
ref = [l for l in lines if l.get("run") == "tiny-gpu1" and "result" in l][-1]
assert ref["global_batch"] == 8 and ref["result"]["tok_s"] > 0, ref
assert ref["result"]["loss"] < math.log(257) - 0.3, ref
print("scaling.sh: %d checks as expected" % (len(checks) + len(scaling)))
PY
# A second call on the same OUT keeps the finished runs (a device call's time limit can cut a part
# short; the next call goes on): no run starts again, and the checks come out the same.
before=$(stat -c %Y out/tiny-tp2-dp2.log)
OUT=$SCRATCH/out NP=4 STEPS=8 DEVICE=cpu PARTS=layouts LAYOUTS="tp2-dp2" \
  bash "$SRC/bench/scaling.sh" "$TRAINER" tiny:2 > again.log 2>&1 || fail "the second call failed"
[ "$(stat -c %Y out/tiny-tp2-dp2.log)" = "$before" ] || fail "the second call ran tp2-dp2 again"
grep -q '"check":"layout","run":"tiny-tp2-dp2".*"pass": true' again.log || fail "no check in the second call"
