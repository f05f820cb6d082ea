#!/usr/bin/env bash
# Preemption under plain mpirun: SIGUSR1 to rank 1 (not the writer) mid-run makes every rank stop
# at the next step boundary, save, and exit 75 (mpirun's exit code too). The only periodic save is
# at the last step, so the checkpoint can only come from the signal. Resuming with --resume auto
# runs to the end with the losses and final parameters of an uninterrupted run, bit for bit.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/checkpoint_lib.sh"
make_small_dataset data.h5
MAX=200
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=64 -o Model.num_layers=2 -o Model.num_heads=4 -o Model.max_seq_len=32
        -o Global.global_batch_size=4 -o Global.micro_batch_size=2 -o Engine.max_steps=$MAX
        -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2
        -o Engine.save_steps=$MAX)

"$MPIEXEC" --oversubscribe --bind-to none -n 2 "$TRAINER" train "${COMMON[@]}" \
  -o Engine.output_dir=run > first.log 2>&1 &
mpirun_pid=$!
# After a few steps (the handlers are installed before the first one), signal rank 1.
deadline=$((SECONDS + 120))
until [ "$(line_count run/metrics.jsonl)" -ge 3 ]; do
  kill -0 $mpirun_pid 2> /dev/null || fail "the run ended before it could be signalled"
  [ $SECONDS -lt $deadline ] || { kill -9 $mpirun_pid; fail "no step within 120 s"; }
  sleep 0.01
done
pid1=$(rank_pid $mpirun_pid 1)
[ -n "$pid1" ] || fail "rank 1's process not found"
kill -USR1 "$pid1"
set +e
timeout 120 tail --pid=$mpirun_pid -f /dev/null
wait $mpirun_pid
rc=$?
set -e
[ $rc -eq 75 ] || { tail -20 first.log; fail "mpirun exited $rc after SIGUSR1 to rank 1, expected 75"; }
stopped=$(sed -nE 's/.*stopped by a preemption signal after step ([0-9]+);.*/\1/p' first.log)
[ -n "$stopped" ] && [ "$stopped" -lt $MAX ] || { cat first.log; fail "no preemption message"; }
[ "$(latest_step run/checkpoints)" = "$stopped" ] || fail "latest is not the step it stopped at ($stopped)"
expect_verified run/checkpoints/step-$(printf %08d "$stopped")
echo "ok: SIGUSR1 to rank 1 -> exit 75 after step $stopped with a checkpoint that verifies"

run_np 2 train "${COMMON[@]}" -o Engine.output_dir=run --resume auto > resumed.log 2>&1 ||
  { tail resumed.log; fail "resumed run"; }
grep -q "resumed from run/checkpoints/step-$(printf %08d "$stopped") at step $stopped " resumed.log ||
  fail "did not resume from step $stopped"
run_np 2 train "${COMMON[@]}" -o Engine.output_dir=ref > ref.log 2>&1 ||
  fail "uninterrupted run"
compare_step_losses run/metrics.jsonl ref/metrics.jsonl 0 || fail "losses differ"
[ "$(step_losses run/metrics.jsonl | tail -n 1)" = "$(step_losses ref/metrics.jsonl | tail -n 1)" ] ||
  fail "the final loss differs"
"$COMPARE_CHECKPOINTS" run/checkpoints/step-$(printf %08d $MAX)/checkpoint.h5 \
  ref/checkpoints/step-$(printf %08d $MAX)/checkpoint.h5 0 || fail "final parameters differ"
echo "preempted at step $stopped, resumed to $MAX: losses and parameters bit-identical"
