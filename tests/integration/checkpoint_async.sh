#!/usr/bin/env bash
# Asynchronous saves (Checkpoint.async_save, the default) and Engine.exit_duration_min:
# - on 2 ranks (tp=2, so rank 0 assembles shards), async saves write the same tensors as
#   synchronous ones, bit for bit, and training's losses do not change;
# - training goes on while rank 0 writes (TRAINER_FAULT_CHECKPOINT_SLOW makes each write ~3 s),
#   and a SIGKILL during a background write leaves `latest` on the previous step, which verifies
#   and resumes;
# - the end of training and a preemption signal both wait for the writer: everything saved is
#   committed when the process exits, and no .tmp is left;
# - Engine.exit_duration_min=0.02: the run saves and exits 75 after ~1.2 s, and resuming it
#   reproduces an uninterrupted run's losses and final checkpoint bit for bit;
# - a divergence on 2 ranks while the step-1 write is in flight commits it before the ranks
#   stop (exit 6), and the divergence message names it.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=64 -o Model.num_layers=2 -o Model.num_heads=4 -o Model.max_seq_len=32
        -o Global.global_batch_size=4 -o Global.micro_batch_size=2 -o Engine.logging_freq=1
        -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2 -o Checkpoint.keep_last=0)
ckpt() { echo "$1/checkpoints/step-$(printf %08d "$2")"; }

# 1. Async against sync: the same tensors at every saved step, the same losses.
EQ=("${COMMON[@]}" -o Distributed.tp_degree=2 -o Engine.max_steps=9 -o Engine.save_steps=3)
run_np 2 train "${EQ[@]}" -o Engine.output_dir=async > async.log 2>&1 || { tail async.log; fail "async run"; }
run_np 2 train "${EQ[@]}" -o Engine.output_dir=sync -o Checkpoint.async_save=false > sync.log 2>&1 ||
  { tail sync.log; fail "sync run"; }
for s in 3 6 9; do
  "$COMPARE_CHECKPOINTS" "$(ckpt sync $s)/checkpoint.h5" "$(ckpt async $s)/checkpoint.h5" 0 ||
    fail "step $s: async and sync checkpoints differ"
  [ "$(h5dump -a step "$(ckpt async $s)/checkpoint.h5" | grep -c "(0): $s$")" -eq 1 ] ||
    fail "step $s: the async checkpoint's step attribute"
done
compare_step_losses async/metrics.jsonl sync/metrics.jsonl 0 || fail "async saves changed the losses"
[ "$(grep -c '"checkpoint_write_s"' async/metrics.jsonl)" -eq 3 ] || fail "no checkpoint_write_s records"
echo "ok: async and sync saves hold the same tensors at steps 3, 6, 9"

# start_slow NAME ARGS...: one process in the background with ~3 s writes (84 tensors x 40 ms).
start_slow() {
  local name=$1; shift
  TRAINER_FAULT_CHECKPOINT_SLOW=40 "$TRAINER" train "${COMMON[@]}" -o Engine.output_dir="$name" \
    "$@" > "$name.log" 2>&1 &
  slow_pid=$!
}
# wait_for NAME CONDITION: polls CONDITION (shell code) while the run lives.
wait_for() { await $slow_pid "$1.log" "$2"; }
last_logged() { grep -o '"step": [0-9]*, "loss"' "$1/metrics.jsonl" 2> /dev/null | tail -n 1 | tr -dc 0-9; }

# 2. SIGKILL during a background write: the write of step 10 is in flight while steps go on.
start_slow killed -o Engine.max_steps=100000 -o Engine.save_steps=5
wait_for killed '[ -d killed/checkpoints/step-00000010.tmp ] && [ "$(last_logged killed)" -ge 12 ]'
kill -9 $slow_pid
wait $slow_pid || true
[ "$(latest_step killed/checkpoints)" = 5 ] || fail "after the kill latest is '$(latest_step killed/checkpoints)', expected 5"
expect_verified "$(ckpt killed 5)"
"$TRAINER" train "${COMMON[@]}" -o Engine.output_dir=killed -o Engine.max_steps=12 \
  -o Engine.save_steps=6 --resume auto > killed.resume.log 2>&1 || { tail killed.resume.log; fail "resume"; }
grep -q "resumed from $(ckpt killed 5) at step 5 " killed.resume.log || fail "did not resume from step 5"
echo "ok: killed at step $(last_logged killed) while step 10 was written: latest stays 5, which resumes"

# 3. The end of training waits for the writer.
start_slow ended -o Engine.max_steps=10 -o Engine.save_steps=4
wait $slow_pid || { tail ended.log; fail "the slow run failed"; }
for s in 4 8 10; do expect_verified "$(ckpt ended $s)"; done
[ "$(latest_step ended/checkpoints)" = 10 ] || fail "end of training: latest is not 10"
! compgen -G "ended/checkpoints/step-*.tmp" > /dev/null || fail "end of training left a .tmp"
grep -n "saved checkpoint $(ckpt ended 10)" ended.log > /dev/null || fail "no saved line for step 10"
echo "ok: the end of training waited for the writer (steps 4, 8, 10 committed)"

# 4. A preemption signal during a background write waits for it, then saves and exits 75.
start_slow preempted -o Engine.max_steps=100000 -o Engine.save_steps=5
wait_for preempted 'compgen -G "preempted/checkpoints/step-*.tmp" > /dev/null'
inflight=$(compgen -G "preempted/checkpoints/step-*.tmp" | head -n 1 | sed -E 's/.*step-0*([0-9]+)\.tmp/\1/')
kill -USR1 $slow_pid
rc=0
wait $slow_pid || rc=$?
[ $rc -eq 75 ] || { tail preempted.log; fail "preempted: exit $rc, expected 75"; }
stopped=$(sed -nE 's/.*stopped by SIGUSR1 after step ([0-9]+);.*/\1/p' preempted.log)
[ -n "$stopped" ] || { cat preempted.log; fail "no stop message"; }
[ "$(latest_step preempted/checkpoints)" = "$stopped" ] || fail "latest is not the stop step $stopped"
expect_verified "$(ckpt preempted "$stopped")"
expect_verified "$(ckpt preempted "$inflight")"
! compgen -G "preempted/checkpoints/step-*.tmp" > /dev/null || fail "preemption left a .tmp"
echo "ok: SIGUSR1 while step $inflight was written: both it and step $stopped committed, exit 75"

# 5. Engine.exit_duration_min: save and exit 75 once the run has used 0.02 minutes (1.2 s), long
# before Engine.max_steps. The decay length is set, so that the resumed and the reference runs,
# which end 5 steps after the stop, follow the same schedule.
LONG=("${COMMON[@]}" -o Optimizer.decay_steps=1000 -o Engine.save_steps=0)
rc=0
run_np 2 train "${LONG[@]}" -o Engine.max_steps=1000000 -o Engine.output_dir=timed \
  -o Engine.exit_duration_min=0.02 > timed.log 2>&1 || rc=$?
[ $rc -eq 75 ] || { tail -20 timed.log; fail "exit_duration_min: exit $rc, expected 75"; }
stopped=$(sed -nE 's/.*stopped at Engine.exit_duration_min=0.02 .* after step ([0-9]+);.*/\1/p' timed.log)
[ -n "$stopped" ] || { tail -20 timed.log; fail "no exit_duration_min stop"; }
[ "$(latest_step timed/checkpoints)" = "$stopped" ] || fail "latest is not step $stopped"
expect_verified "$(ckpt timed "$stopped")"
END=$((stopped + 5))
run_np 2 train "${LONG[@]}" -o Engine.max_steps=$END -o Engine.save_steps=$END \
  -o Engine.output_dir=timed --resume auto > timed.resume.log 2>&1 ||
  { tail timed.resume.log; fail "resume after exit_duration_min"; }
grep -q "resumed from $(ckpt timed "$stopped") at step $stopped " timed.resume.log ||
  fail "did not resume from step $stopped"
run_np 2 train "${LONG[@]}" -o Engine.max_steps=$END -o Engine.save_steps=$END \
  -o Engine.output_dir=untimed > untimed.log 2>&1 || fail "uninterrupted run"
compare_step_losses timed/metrics.jsonl untimed/metrics.jsonl 0 || fail "losses differ"
"$COMPARE_CHECKPOINTS" "$(ckpt timed $END)/checkpoint.h5" "$(ckpt untimed $END)/checkpoint.h5" 0 ||
  fail "final parameters differ"
echo "ok: exit_duration_min=0.02 stopped after step $stopped (exit 75); resumed to $END bit-identically"

# 6. A divergence (Optimizer.lr=1e30: step 2's loss is not finite) on 2 ranks while rank 0 still
# writes step 1's checkpoint: the ranks finish the write together before they stop.
rc=0
TRAINER_FAULT_CHECKPOINT_SLOW=40 run_np 2 train "${COMMON[@]}" -o Distributed.tp_degree=2 \
  -o Optimizer.lr=1e30 -o Engine.max_steps=20 -o Engine.save_steps=1 \
  -o Engine.output_dir=diverged > diverged.log 2>&1 || rc=$?
[ $rc -eq 6 ] || { tail -20 diverged.log; fail "diverged: exit $rc, expected 6"; }
[ "$(latest_step diverged/checkpoints)" = 1 ] || { tail -20 diverged.log; fail "diverged: latest is not step 1"; }
expect_verified "$(ckpt diverged 1)"
! compgen -G "diverged/checkpoints/step-*.tmp" > /dev/null || fail "the divergence left a .tmp"
grep -q "training diverged (step 2.*the last checkpoint is $(ckpt diverged 1)" diverged.log ||
  { tail -20 diverged.log; fail "the divergence message does not name step 1's checkpoint"; }
echo "ok: a divergence while step 1 was written committed it first (exit 6)"
