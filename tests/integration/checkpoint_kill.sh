#!/usr/bin/env bash
# Crash safety: rank 0 (the writer) is killed with SIGKILL at random moments of checkpoint saves,
# 20 times, on 2 ranks saving every step with keep_last=1. After each kill `latest` must name a
# checkpoint that verifies (`trainer inspect`), the next `--resume auto` must start from it (after
# removing the interrupted save's .tmp folder), and every loss any run logs must be bit-identical
# to an uninterrupted run's loss for that step. A final run finishes: its last checkpoint is
# bit-identical to the uninterrupted run's.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
KILLS=${TRAINER_TEST_KILLS:-20}
# Each kill lets a run make one or two steps (a save in progress, then up to 150 ms): 20 kills
# need ~30 steps, and a run that reaches MAX ends before it can be killed. Room to spare.
MAX=50
# After rank 0 dies, mpirun SIGTERMs rank 1, which takes it as a preemption request and stays in
# its collective; by default mpirun waits a second before SIGKILL. Do not wait.
export OMPI_MCA_odls_base_sigkill_timeout=0
# hidden 256: a 20 MB checkpoint, so that a save lasts long enough (~0.1 s) to be hit.
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=256 -o Model.num_layers=2 -o Model.num_heads=4 -o Model.max_seq_len=32
        -o Global.global_batch_size=2 -o Global.micro_batch_size=1 -o Engine.max_steps=$MAX
        -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2)
# CHECKPOINT_KILL_LAYOUT: overrides for another layout of the 2 ranks (checkpoint_kill_sharded.sh).
read -r -a layout <<< "${CHECKPOINT_KILL_LAYOUT:-}"
COMMON+=("${layout[@]}")
run_np 2 train "${COMMON[@]}" -o Engine.save_steps=$MAX -o Engine.output_dir=ref > ref.log 2>&1 ||
  { tail -20 ref.log; fail "uninterrupted run"; }

CKPT=run/checkpoints
RUN=("${COMMON[@]}" -o Engine.save_steps=1 -o Checkpoint.keep_last=1 -o Engine.output_dir=run)
mid_write=0 before_latest=0 after_commit=0 cleaned=0 kills=0
for i in $(seq 1 "$KILLS"); do
  before=$(latest_step $CKPT)
  records=$(line_count run/metrics.jsonl)
  # Niced, so that this script's polling gets a core while both ranks compute.
  nice -n 10 "$MPIEXEC" --oversubscribe --bind-to none -n 2 "$TRAINER" train "${RUN[@]}" \
    --resume auto > "kill$i.log" 2>&1 &
  mpirun_pid=$!
  # Wait for this run's first step (the start has removed any leftover .tmp by then), then for a
  # save in progress (a step-*.tmp folder), then let it run a random 0-150 ms.
  deadline=$((SECONDS + 60)) stepped=0
  while :; do
    [ $stepped -eq 1 ] || [ "$(line_count run/metrics.jsonl)" -le "$records" ] || stepped=1
    [ $stepped -eq 1 ] && compgen -G "$CKPT/step-*.tmp" > /dev/null && break
    kill -0 $mpirun_pid 2> /dev/null || break
    [ $SECONDS -lt $deadline ] || { kill -9 $mpirun_pid; fail "run $i: no save started within 60 s"; }
    sleep 0.002
  done
  sleep "0.$(printf %03d $((RANDOM % 150)))"
  pid0=$(rank_pid $mpirun_pid 0)
  if [ -z "$pid0" ]; then
    wait $mpirun_pid || true
    fail "run $i ended before it could be killed (see kill$i.log)"
  fi
  kill -9 "$pid0"
  set +e
  timeout 60 tail --pid=$mpirun_pid -f /dev/null
  wait $mpirun_pid
  rc=$?
  set -e
  [ $rc -ne 0 ] || fail "run $i: mpirun exited 0 although rank 0 was killed"
  kills=$((kills + 1))
  grep -q "removing incomplete checkpoint" "kill$i.log" && cleaned=$((cleaned + 1))
  # Where the kill landed: mid-write (a .tmp left), between rename and `latest`, or after both.
  newest=$(newest_step $CKPT)
  after=$(latest_step $CKPT)
  if compgen -G "$CKPT/step-*.tmp" > /dev/null; then mid_write=$((mid_write + 1))
  elif [ -n "$newest" ] && [ "$newest" != "$after" ]; then before_latest=$((before_latest + 1))
  else after_commit=$((after_commit + 1)); fi
  if [ -n "$before" ]; then
    grep -q "resumed from $CKPT/step-$(printf %08d "$before") at step $before " "kill$i.log" ||
      { cat "kill$i.log"; fail "run $i did not resume from step $before (latest before it)"; }
  fi
  [ -n "$after" ] || continue  # killed during the very first save: nothing committed yet
  expect_verified "$CKPT/step-$(printf %08d "$after")"
  echo "kill $i: latest step $after verifies"
done
# The last run finishes; every loss logged by every run matches the uninterrupted run.
last=$(latest_step $CKPT)
run_np 2 train "${RUN[@]}" --resume auto > final.log 2>&1 || { tail -20 final.log; fail "final run"; }
if [ -n "$last" ]; then
  grep -q "resumed from $CKPT/step-$(printf %08d "$last") at step $last " final.log ||
    fail "the final run did not resume from step $last"
else
  # Every kill landed in the first save (a slow build: a save outlasts the 150 ms window), so
  # nothing was committed and the final run must start afresh.
  ! grep -q "resumed from" final.log || fail "the final run resumed although nothing was committed"
fi
compare_step_losses run/metrics.jsonl ref/metrics.jsonl 0 || fail "a resumed loss differs"
"$COMPARE_CHECKPOINTS" ref/checkpoints/step-$(printf %08d $MAX)/checkpoint.h5 \
  $CKPT/step-$(printf %08d $MAX)/checkpoint.h5 0 || fail "final parameters differ"
echo "survived $kills SIGKILLs of rank 0 while saving ($mid_write mid-write, $before_latest" \
     "between rename and latest, $after_commit after commit; $cleaned .tmp folders cleaned at start)"
grep -h checkpoint_save_s run/metrics.jsonl | tail -n 1
