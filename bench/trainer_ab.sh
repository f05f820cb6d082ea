#!/usr/bin/env bash
# Trainer builds against each other on one GPU: ROUNDS rounds of trainer-only runs
# (bench/gpu_vs_pytorch.sh with SKIP_PEER=1) on the same shapes, every build once per round, the
# order rotating from round to round so that no build always runs first on a cooler GPU. Prints
# each run's JSON line (with "build" and "round" added), then one line per shape: each build's
# tokens/s by round and its ratio to the first build's in the same round, their mean, and the
# lowest and highest (builds run minutes apart share the GPU's state; runs hours apart or on
# another machine do not, so compare ratios, not tokens/s, between invocations).
#
#   bench/trainer_ab.sh ROUNDS NAME=TRAINER NAME=TRAINER [...] -- MODEL [MODEL...]
#   MODEL as for bench/gpu_vs_pytorch.sh (124m:B, 350m:B, 1.3b:B); env: STEPS (default 30), NP,
#   TRAINER_ARGS and WORK as there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() {
  echo "usage: bench/trainer_ab.sh ROUNDS NAME=TRAINER NAME=TRAINER [...] -- MODEL [MODEL...]" >&2
  exit 2
}
[ $# -ge 4 ] || usage
ROUNDS=$1
shift
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || usage
NAMES=() PATHS=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  [[ $1 == ?*=?* ]] || usage
  NAMES+=("${1%%=*}") PATHS+=("${1#*=}")
  shift
done
if [ $# -lt 2 ] || [ ${#NAMES[@]} -lt 2 ]; then usage; fi
shift
RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
count=${#NAMES[@]}
for ((round = 1; round <= ROUNDS; round++)); do
  for ((k = 0; k < count; k++)); do
    i=$(((k + round - 1) % count))
    # Each build keeps its own log (WORK/MODEL-bB-npNP-NAME.log). The runs' JSON lines, tagged,
    # to stdout and RESULTS; anything else (a failed run's log tail) to stderr.
    TAG=-${NAMES[$i]} SKIP_PEER=1 STEPS=${STEPS:-30} bash "$ROOT/bench/gpu_vs_pytorch.sh" "${PATHS[$i]}" - "$@" |
      python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{\"who\":\"trainer\""):
        sys.stderr.write(line)
        continue
    run = json.loads(line)
    run["build"], run["round"] = sys.argv[1], int(sys.argv[2])
    print(json.dumps(run), flush=True)' "${NAMES[$i]}" "$round" | tee -a "$RESULTS"
  done
done
python3 - "$RESULTS" "${NAMES[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
names = sys.argv[2:]
tok_s = {}  # (model, B) -> build -> round -> tokens/s
for r in runs:
    if isinstance(r.get("result"), dict) and "tok_s" in r["result"]:
        tok_s.setdefault((r["model"], r["B"]), {}).setdefault(r["build"], {})[r["round"]] = \
            r["result"]["tok_s"]
for (model, B), builds in sorted(tok_s.items()):
    base = builds.get(names[0], {})
    line = {"model": model, "B": B, "base": names[0], "tok_s": {n: builds.get(n, {}) for n in names}}
    for n in names[1:]:
        ratios = [builds[n][k] / base[k] for k in sorted(base) if k in builds.get(n, {})]
        if ratios:
            line[n + "_over_" + names[0]] = {"mean": round(statistics.mean(ratios), 4),
                                             "min": round(min(ratios), 4),
                                             "max": round(max(ratios), 4), "rounds": len(ratios)}
    print(json.dumps(line))
PY
