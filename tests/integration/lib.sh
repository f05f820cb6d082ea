# Shared helpers for the integration scripts: $1 trainer binary, $2 source dir, $3 scratch dir.
set -euo pipefail
TRAINER=$1
SRC=$2
SCRATCH=$3
MPIEXEC=${MPIEXEC:-mpiexec}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export PMIX_MCA_pcompress_base_silence_warning=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
COMPARE_CHECKPOINTS=${COMPARE_CHECKPOINTS:-compare_checkpoints}
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" && cd "$SCRATCH"

fail() { echo "FAIL: $*" >&2; exit 1; }

# mpirun N ARGS...: the trainer under mpiexec, with a hard time limit (a hang fails the test).
run_np() {
  local n=$1; shift
  timeout --kill-after=5 240 "$MPIEXEC" --oversubscribe --bind-to none -n "$n" "$TRAINER" "$@"
}

# A small packed dataset from text every Debian/Ubuntu machine has (or the project's own docs).
make_small_dataset() {
  local out=$1
  local inputs=()
  for f in /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 "$SRC"/docs/*.md; do
    [ -f "$f" ] && inputs+=("$f")
  done
  "$TRAINER" pack --input "${inputs[@]}" --output "$out" >/dev/null
}

# expect_error CODE TEXT COMMAND...: exit code CODE and exactly one error line containing TEXT.
expect_error() {
  local code=$1 text=$2 rc=0
  shift 2
  "$@" > out.log 2> err.log || rc=$?
  [ "$rc" = "$code" ] || { cat out.log err.log; fail "$*: exit $rc, expected $code"; }
  if [ "$(grep -c '^error: ' err.log)" != 1 ] || ! grep -q "$text" err.log; then
    cat err.log
    fail "$*: expected one error line with '$text'"
  fi
}

# Losses of metrics.jsonl training records, one per line, as printed (%.8g).
losses() { grep -o '"loss": [^,}]*' "$1" | awk '{print $2}'; }

# compare_losses A B TOL: relative difference of each line <= TOL.
compare_losses() {
  paste <(losses "$1") <(losses "$2") | awk -v tol="$3" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r }
    END { if (n == 0) { print "no losses"; exit 1 }
          printf "%d losses, worst relative difference %.3e (tolerance %s)\n", n, worst, tol;
          exit (worst <= tol) ? 0 : 1 }'
}
