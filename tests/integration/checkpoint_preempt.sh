#!/usr/bin/env bash
# Preemption under plain mpirun: SIGUSR1 to rank 1 (not the writer) mid-run makes every rank stop
# at the next step boundary, save, and exit 75 (mpirun's exit code too). The only periodic save is
# at the last step, so the checkpoint can only come from the signal. Resuming with --resume auto
# runs to the end with the losses and final parameters of an uninterrupted run, bit for bit.
# Ctrl-C on slurm/mpirun_hostfile.sh (the whole process group gets SIGINT): the script passes
# SIGUSR1 on, the ranks save, and it exits 75.
# Ctrl-C on one process (no mpirun): the first SIGINT says so, saves and exits 75 as SIGTERM does;
# a second one quits at once, without a checkpoint.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
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
await $mpirun_pid first.log '[ "$(line_count run/metrics.jsonl)" -ge 3 ]'
pid1=$(rank_pid $mpirun_pid 1)
[ -n "$pid1" ] || fail "rank 1's process not found"
kill -USR1 "$pid1"
wait_exit $mpirun_pid
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

# Ctrl-C on slurm/mpirun_hostfile.sh: SIGINT to its whole process group, as a terminal sends it
# (mpirun alone would kill the ranks). Started in a session of its own with SIGINT at its default
# (a background job of this script would start with it ignored, as bash does).
echo "localhost slots=2" > hosts
MPIRUN="$MPIEXEC" python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execvp(sys.argv[1], sys.argv[1:])' bash "$SRC/slurm/mpirun_hostfile.sh" -H hosts -- \
  "$TRAINER" train "${COMMON[@]}" -o Engine.output_dir=wrapped > wrapped.log 2>&1 &
wrapper_pid=$!
await $wrapper_pid wrapped.log '[ "$(line_count wrapped/metrics.jsonl)" -ge 3 ]'
kill -INT -- -$wrapper_pid
wait_exit $wrapper_pid
[ $rc -eq 75 ] || { tail -20 wrapped.log; fail "mpirun_hostfile.sh exited $rc after Ctrl-C, expected 75"; }
stopped=$(sed -nE 's/.*stopped by SIGUSR1 after step ([0-9]+);.*/\1/p' wrapped.log)
[ -n "$stopped" ] || { cat wrapped.log; fail "no stop message after Ctrl-C on mpirun_hostfile.sh"; }
[ "$(latest_step wrapped/checkpoints)" = "$stopped" ] || fail "latest is not the step it stopped at ($stopped)"
expect_verified wrapped/checkpoints/step-$(printf %08d "$stopped")
echo "ok: Ctrl-C on mpirun_hostfile.sh -> exit 75 after step $stopped with a checkpoint that verifies"

# start_single NAME: one process in the background (no mpirun), once it has logged 3 steps.
start_single() {
  "$TRAINER" train "${COMMON[@]}" -o Engine.output_dir="$1" > "$1.log" 2>&1 &
  single_pid=$!
  await $single_pid "$1.log" "[ \"\$(line_count $1/metrics.jsonl)\" -ge 3 ]"
}
# Steps of ~0.5 s (tiny-cpu's model, 16 micro-batches), so that two signals land inside one.
COMMON+=(-c "$SRC/configs/tiny-cpu.yaml" -o Model.hidden_size=128 -o Model.num_layers=4
         -o Model.max_seq_len=128 -o Global.global_batch_size=64 -o Global.micro_batch_size=4)
start_single ctrl_c
kill -INT $single_pid
rc=0
wait $single_pid || rc=$?
[ $rc -eq 75 ] || { tail -20 ctrl_c.log; fail "one process exited $rc after SIGINT, expected 75"; }
grep -q "^interrupted (Ctrl-C): stopping after this step with a checkpoint" ctrl_c.log ||
  { cat ctrl_c.log; fail "SIGINT was not acknowledged"; }
stopped=$(sed -nE 's/.*stopped by SIGINT \(Ctrl-C\) after step ([0-9]+);.*/\1/p' ctrl_c.log)
[ -n "$stopped" ] || { cat ctrl_c.log; fail "no stop message naming SIGINT"; }
expect_verified ctrl_c/checkpoints/step-$(printf %08d "$stopped")
echo "ok: Ctrl-C -> exit 75 after step $stopped with a checkpoint that verifies"

start_single ctrl_c_twice
kill -INT $single_pid
# The second once the first is acknowledged (two pending SIGINTs would merge into one).
until grep -q "^interrupted (Ctrl-C)" ctrl_c_twice.log; do sleep 0.01; done
kill -INT $single_pid
rc=0
wait $single_pid || rc=$?
[ $rc -eq 130 ] || { tail -20 ctrl_c_twice.log; fail "two SIGINTs: exit $rc, expected 130 (killed by SIGINT)"; }
[ -z "$(newest_step ctrl_c_twice/checkpoints)" ] || fail "two SIGINTs: a checkpoint was saved"
echo "ok: a second Ctrl-C quits at once (exit 130), nothing saved"

# A signal during set-up (here while rank 0 waits for a debugger, TRAINER_WAIT_FOR_DEBUGGER=0)
# stops the run at the first step boundary as one during training does: the wait ends, one step
# trains, a checkpoint is saved and the exit code is 75 (not 143, killed by SIGTERM).
TRAINER_WAIT_FOR_DEBUGGER=0 "$TRAINER" train "${COMMON[@]}" -o Engine.output_dir=setup \
  > setup.log 2>&1 &
single_pid=$!
await $single_pid setup.log 'grep -q "waiting for a debugger" setup.log'
kill -TERM $single_pid
wait_exit $single_pid
[ $rc -eq 75 ] || { tail -20 setup.log; fail "SIGTERM during set-up: exit $rc, expected 75"; }
grep -q "stopped by SIGTERM after step 1; checkpoint saved" setup.log ||
  { cat setup.log; fail "SIGTERM during set-up: no stop after the first step"; }
expect_verified setup/checkpoints/step-00000001
echo "ok: SIGTERM during set-up -> exit 75 after step 1 with a checkpoint that verifies"
