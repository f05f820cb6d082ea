# Helpers of the checkpoint_*.sh tests (sourced after lib.sh): step-aligned loss comparison,
# finding one rank's process, flipping a byte inside a stored tensor, inspect checks.

# "step loss" per training record of a metrics.jsonl, as printed.
step_losses() {
  grep '"loss": ' "$1" | sed -E 's/.*"step": ([0-9]+),.*"loss": ([^,}]*).*/\1 \2/'
}

# compare_step_losses RUN REF TOL [FIRST_STEP]: every training record of RUN at a step >=
# FIRST_STEP (default 1) has REF's loss for that step, to a relative TOL (0: the same printed
# value). A step of RUN missing from REF fails; so does RUN having no such records.
compare_step_losses() {
  local run=$1 ref=$2 tol=$3 first=${4:-1}
  awk -v tol="$tol" -v first="$first" '
    NR == FNR { ref[$1] = $2; next }
    $1 < first { next }
    { n++
      if (!($1 in ref)) { printf "step %d: not in the reference\n", $1; bad++; next }
      if (tol == 0) { if ($2 != ref[$1]) { printf "step %d: %s vs %s\n", $1, $2, ref[$1]; bad++ } ; next }
      d = $2 - ref[$1]; if (d < 0) d = -d; r = d / (ref[$1] < 0 ? -ref[$1] : ref[$1])
      if (r > worst) worst = r
      if (r > tol) { printf "step %d: %s vs %s (relative %.3e)\n", $1, $2, ref[$1], r; bad++ } }
    END { if (n == 0) { print "no losses to compare"; exit 1 }
          printf "%d losses from step %d on, worst relative difference %.3e (tolerance %s)\n",
                 n, first, worst, tol
          exit bad > 0 }' <(step_losses "$ref") <(step_losses "$run")
}

# rank_pid MPIRUN_PID RANK: the pid of that world rank among mpirun's children (Open MPI sets
# OMPI_COMM_WORLD_RANK in each rank's environment); empty when not (yet) found.
rank_pid() {
  local child
  for child in $(pgrep -P "$1"); do
    if grep -qxz "OMPI_COMM_WORLD_RANK=$2" "/proc/$child/environ" 2> /dev/null; then
      echo "$child"
      return 0
    fi
  done
}

# flip_tensor_byte FILE DATASET: inverts one byte in the middle of DATASET's stored values (found
# by searching the file for the tensor's own bytes, as h5dump writes them), in place.
flip_tensor_byte() {
  local file=$1 dataset=$2 bytes=flip_$$.bin
  h5dump -d "$dataset" -b LE -o "$bytes" "$file" > /dev/null || fail "h5dump of $dataset in $file"
  # Where the 32 bytes from the middle of the tensor sit in the file (a byte search, not grep:
  # grep matches lines, so a 0x0a among the 32 bytes would hide the match).
  local offsets
  offsets=$(python3 - "$bytes" "$file" <<'PY'
import sys
tensor, whole = (open(path, "rb").read() for path in sys.argv[1:3])
middle = len(tensor) // 2 // 4 * 4
pattern = tensor[middle:middle + 32]
found, at = [], whole.find(pattern)
while at >= 0:
    found.append(at)
    at = whole.find(pattern, at + 1)
print(" ".join(map(str, found)))
PY
)
  [ "$(wc -w <<<"$offsets")" -eq 1 ] || fail "$dataset: its bytes occur $(wc -w <<<"$offsets") times in $file"
  local at=$((offsets + 3)) old
  old=$(od -An -tu1 -j "$at" -N 1 "$file" | tr -d ' ')
  printf "\\x$(printf %02x $((old ^ 0xff)))" | dd of="$file" bs=1 seek="$at" conv=notrunc status=none
  rm -f "$bytes"
  echo "flipped byte $at of $file (inside $dataset): $old -> $((old ^ 0xff))"
}

# flip_attribute_byte FILE NAME VALUE: inverts one bit of the int64 root attribute NAME's stored
# VALUE (found after the attribute's name in the root's object header), in place.
flip_attribute_byte() {
  python3 - "$@" <<'PY' || fail "flipping attribute $2 of $1"
import struct, sys
path, name, value = sys.argv[1], b"\0" + sys.argv[2].encode() + b"\0", int(sys.argv[3])
data = bytearray(open(path, "rb").read())
at = data.find(name)
assert at >= 0 and data.find(name, at + 1) < 0, "attribute name not found once"
where = data.find(struct.pack("<q", value), at, at + 96)
assert where >= 0, "attribute value not found"
data[where] ^= 0x02
open(path, "wb").write(data)
PY
}

# expect_verified FOLDER: `trainer inspect` exits 0 and says the checkpoint verifies.
expect_verified() {
  "$TRAINER" inspect "$1" > inspect.out 2>&1 || { cat inspect.out; fail "inspect $1 exited non-zero"; }
  grep -q "^  verifies         yes" inspect.out || { cat inspect.out; fail "inspect $1: no 'verifies yes'"; }
}

# latest_step DIR: the step number `latest` names (empty when there is no latest).
latest_step() {
  [ -f "$1/latest" ] || return 0
  sed -E 's/^step-0*([0-9]+)$/\1/; s/^$/0/' "$1/latest"
}

# one_error_line LOG PATTERN: LOG holds exactly one "error: " line and it matches PATTERN.
one_error_line() {
  local n
  n=$(grep -c 'error: ' "$1" || true)
  [ "$n" -eq 1 ] || { cat "$1"; fail "$1: $n error lines, expected one"; }
  grep 'error: ' "$1" | grep -q -- "$2" || { cat "$1"; fail "$1: the error line does not match /$2/"; }
}

# line_count FILE: its number of lines (0 when it does not exist).
line_count() {
  if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi
}

# wait_exit PID: waits (up to 120 s) for the background process PID to end; its exit code in $rc.
wait_exit() {
  rc=0
  timeout 120 tail --pid="$1" -f /dev/null
  wait "$1" || rc=$?
}

# await PID LOG CONDITION: polls CONDITION (shell code) until it holds, for up to 120 s while the
# process PID runs; otherwise shows LOG and fails the test naming CONDITION (a process that timed
# out is killed first, with its process group where it leads one).
await() {
  local pid=$1 log=$2 condition=$3 deadline=$((SECONDS + 120))
  until eval "$condition"; do
    kill -0 "$pid" 2> /dev/null || { cat "$log"; fail "ended before: $condition"; }
    if [ $SECONDS -ge $deadline ]; then
      kill -9 -- "-$pid" 2> /dev/null || kill -9 "$pid"
      fail "timed out waiting for: $condition"
    fi
    sleep 0.01
  done
}

# newest_step DIR: the highest step with a committed step folder (empty when there is none).
newest_step() {
  local folders=("$1"/step-????????)
  [ -d "${folders[-1]}" ] || return 0
  sed -E 's/.*step-0*([0-9]+)$/\1/' <<<"${folders[-1]}"
}

# resume_bit_exact NAME NP OVERRIDES...: `trainer train` of "${COMMON[@]}" and OVERRIDES on NP
# ranks, 10 steps into full/, and 5 steps into part/ resumed there to step 10 (--resume auto): the
# losses, the MoE fields of the metrics and the step-10 parameters and moments must be
# bit-identical. NAME names the layout in failures.
resume_bit_exact() {
  local name=$1 np=$2; shift 2
  run_np "$np" train "${COMMON[@]}" "$@" -o Engine.max_steps=10 -o Engine.output_dir=full \
    > full.log 2>&1 || { tail -20 full.log; fail "uninterrupted $name run"; }
  run_np "$np" train "${COMMON[@]}" "$@" -o Engine.max_steps=5 -o Engine.output_dir=part \
    > part.a.log 2>&1 || { tail -20 part.a.log; fail "$name run to step 5"; }
  run_np "$np" train "${COMMON[@]}" "$@" -o Engine.max_steps=10 -o Engine.output_dir=part \
    --resume auto > part.b.log 2>&1 || { tail -20 part.b.log; fail "$name resumed to step 10"; }
  grep -q "resumed from" part.b.log || fail "$name did not resume"
  diff <(losses full/metrics.jsonl) <(losses part/metrics.jsonl) ||
    fail "$name: resumed losses are not bit-identical"
  diff <(moe_fields full/metrics.jsonl) <(moe_fields part/metrics.jsonl) ||
    fail "$name: resumed MoE metrics differ"
  "$COMPARE_CHECKPOINTS" full/checkpoints/step-00000010/checkpoint.h5 \
    part/checkpoints/step-00000010/checkpoint.h5 0 || fail "$name: parameters differ after resume"
}
