#!/usr/bin/env bash
# bench/trainer_ab.sh with two stand-in trainers whose figures are known in closed form: build
# "base" runs at 1000 tokens/s and build "new" at 1100, each less 1% for every run before it in
# the call (a GPU that slows as it warms). Two rounds, the order rotating: base, new, new, base.
# So new/base is 1100 * 0.99 / 1000 = 1.089 in round 1 and 1100 * 0.98 / (1000 * 0.97) = 1.11134
# in round 2: mean 1.10017. A script that did not pair runs by round, or did not rotate, gives
# other figures. Also: bad arguments exit 2 with the usage line.
#   trainer_ab.sh TRAINER SOURCE_DIR SCRATCH   (the trainer is not used)
set -euo pipefail
SRC=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK/bin" "$WORK/bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No GPU here: an nvidia-smi that samples nothing (the runs report a null clock).
printf '#!/bin/sh\nexit 0\n' > "$WORK/bin/nvidia-smi"
for build in base:1000 new:1100; do
  cat > "$WORK/bin/${build%%:*}" <<EOF
#!/usr/bin/env bash
# "train ... -o Engine.output_dir=DIR ...": DIR/metrics.jsonl at ${build#*:} tokens/s less 1% per
# earlier run of the call (counted in $WORK/runs).
out=
for a in "\$@"; do case \$a in Engine.output_dir=*) out=\${a#*=} ;; esac; done
earlier=\$(wc -l < "$WORK/runs" 2> /dev/null || echo 0)
echo run >> "$WORK/runs"
rate=\$(python3 -c "print(${build#*:} * (1 - 0.01 * \$earlier))")
mkdir -p "\$out"
for step in 10 20 30; do
  echo "{\"step\": \$step, \"tokens_per_s\": \$rate, \"mfu\": 0.5, \"memory_gib\": 1.5, \"loss\": 10.9}"
done > "\$out/metrics.jsonl"
EOF
  chmod +x "$WORK/bin/${build%%:*}"
done
# The data the runs would read (the stand-ins read nothing): the 8 batches the bench matches the
# peer with by default, and the 20M-token stream of MATCH_PEER=0.
touch "$WORK/bench/peer-b8-t1024.h5" "$WORK/bench/random.h5"
BIN=$WORK/bin
export PATH="$BIN:$PATH" WORK="$WORK/bench"
out=$(bash "$SRC/bench/trainer_ab.sh" 2 base="$BIN/base" new="$BIN/new" -- 124m:8)
echo "$out"
python3 - "$out" <<'PY'
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
runs = [l for l in lines if "who" in l]
order = [(r["round"], r["build"], r["result"]["tok_s"]) for r in runs]
want = [(1, "base", 1000), (1, "new", 1089), (2, "new", 1078), (2, "base", 970)]
assert order == want, f"runs {order}, expected {want}"
summary = [l for l in lines if "base" in l and "who" not in l]
assert len(summary) == 1, summary
ratio = summary[0]["new_over_base"]
assert ratio == {"mean": 1.1002, "min": 1.089, "max": 1.1113, "rounds": 2}, ratio
assert summary[0]["model"] == "124m" and summary[0]["B"] == 8, summary[0]
print("ok: run order, per-round pairing and the ratios")
PY
for bad in "0 a=x b=y -- 124m:8" "2 a=x -- 124m:8" "2 a=x b=y 124m:8" "2 a=x b=y --"; do
  # shellcheck disable=SC2086
  if msg=$(bash "$SRC/bench/trainer_ab.sh" $bad 2>&1); then
    echo "FAIL: '$bad' was accepted" >&2
    exit 1
  fi
  grep -q "^usage: bench/trainer_ab.sh" <<< "$msg" || { echo "FAIL: '$bad': $msg" >&2; exit 1; }
done
echo "ok: bad arguments give the usage line"
