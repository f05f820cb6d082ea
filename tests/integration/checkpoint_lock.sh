#!/usr/bin/env bash
# One run writes a checkpoint folder at a time (<Checkpoint.dir>/.lock, held by rank 0):
#  - a second run on the folder of a running one stops at once with exit 4 and one error line
#    naming the lock and its holder, touching nothing; so does one on its Engine.output_dir with
#    a Checkpoint.dir of its own (<output_dir>/.lock); the first run finishes as if alone;
#  - a lock held by another Slurm job stops the run the same way; one held by an earlier run of
#    the same Slurm job (a requeue after a node failure) is waited for, and the run goes on once it
#    is released, and the wait counts as progress for the watchdog;
#  - a holder killed with SIGKILL leaves no lock behind;
#  - `trainer inspect` of the folder names the lock's holder, or says that there is none.
# The other holders are python3 processes taking the same lock with fcntl (lockf), as another
# program on the machine would.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
MAX=900  # about 15 s: the refused runs start (2 ranks each) while it trains; 3 digits (step-00000$MAX)
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=128 -o Model.num_layers=2 -o Model.num_heads=4 -o Model.max_seq_len=64
        -o Global.global_batch_size=8 -o Global.micro_batch_size=2 -o Engine.logging_freq=1
        -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2 -o Engine.save_steps=100)

# 1. Two runs, one folder.
"$MPIEXEC" --oversubscribe --bind-to none -n 2 "$TRAINER" train "${COMMON[@]}" \
  -o Engine.max_steps=$MAX -o Engine.output_dir=first > first.log 2>&1 &
mpirun_pid=$!
await $mpirun_pid first.log '[ "$(line_count first/metrics.jsonl)" -ge 3 ]'
set +e
run_np 2 train "${COMMON[@]}" -o Engine.max_steps=$MAX -o Engine.output_dir=second \
  -o Checkpoint.dir=first/checkpoints > second.out 2> second.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat second.out second.err; fail "second run: exit $rc, expected 4"; }
kill -0 $mpirun_pid 2> /dev/null || fail "the first run ended before the second was refused; raise MAX"
one_error_line second.err "checkpoint folder in use (first/checkpoints/.lock, Checkpoint.dir): another run holds its lock (host [^,]*, pid [0-9]*, since "
[ ! -e second/metrics.jsonl ] || fail "the refused run wrote metrics"
[ ! -e second ] || fail "the refused run left its Engine.output_dir behind: $(ls -a second)"
# The running one's Engine.output_dir with a Checkpoint.dir of its own: its metrics.jsonl and
# TensorBoard events would interleave with the first run's; refused the same way.
lines=$(line_count first/metrics.jsonl)
set +e
run_np 2 train "${COMMON[@]}" -o Engine.max_steps=$MAX -o Engine.output_dir=first \
  -o Checkpoint.dir=third/checkpoints > third.out 2> third.err
rc=$?
set -e
[ $rc -eq 4 ] || { cat third.out third.err; fail "third run: exit $rc, expected 4"; }
kill -0 $mpirun_pid 2> /dev/null || fail "the first run ended before the third was refused; raise MAX"
one_error_line third.err "output folder in use (first/.lock, Engine.output_dir): another run holds its lock (host [^,]*, pid [0-9]*, since .*interleave their metrics.jsonl"
[ "$(line_count first/metrics.jsonl)" -ge "$lines" ] && ! grep -q '"step": 1,' <(tail -n +$((lines + 1)) first/metrics.jsonl) ||
  fail "the refused run wrote into first/metrics.jsonl"
wait $mpirun_pid || { cat first.log; fail "the first run failed beside the refused one"; }
[ "$(latest_step first/checkpoints)" = $MAX ] || fail "the first run's latest is not step $MAX"
[ "$(line_count first/metrics.jsonl)" -ge $MAX ] || fail "the first run's metrics are incomplete"
expect_verified first/checkpoints/step-00000$MAX
echo "ok: a second run on a running folder -> exit 4: $(grep 'error: ' second.err)"

# hold JOB SECONDS: a python3 process holds first/checkpoints/.lock (text naming Slurm job JOB)
# for SECONDS, once it prints "held".
hold() {
  python3 - first/checkpoints/.lock "$1" "$2" <<'PY' &
import fcntl, os, sys, time
f = open(sys.argv[1], "r+")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
f.truncate(0); f.write(f"host=elsewhere pid={os.getpid()} slurm_job={sys.argv[2]} since=earlier\n"); f.flush()
print("held", flush=True)
time.sleep(float(sys.argv[3]))
PY
  holder_pid=$!
  for _ in $(seq 500); do grep -q held hold.out 2> /dev/null && return; sleep 0.01; done
  fail "the python3 holder did not take the lock"
}
short=(-o Engine.max_steps=$((MAX + 4)) -o Engine.output_dir=first --resume auto)

# 2. Another Slurm job's lock: refused at once; `trainer inspect` of the folder names the holder.
hold 4242 30 > hold.out
set +e
SLURM_JOB_ID=5 run_np 1 train "${COMMON[@]}" "${short[@]}" > other.out 2> other.err
rc=$?
"$TRAINER" inspect first/checkpoints > inspect_held.out 2>&1
inspect_rc=$?
set -e
kill $holder_pid; wait $holder_pid 2> /dev/null || true
[ $inspect_rc -eq 0 ] || { cat inspect_held.out; fail "inspect of the held folder: exit $inspect_rc"; }
grep -q "^  latest           step-00000$MAX$" inspect_held.out || { cat inspect_held.out; fail "inspect: no latest"; }
grep -q "^  in use           yes: host elsewhere, pid [0-9]*, Slurm job 4242, since earlier$" inspect_held.out ||
  { cat inspect_held.out; fail "inspect does not name the lock's holder"; }
[ $rc -eq 4 ] || { cat other.out other.err; fail "another job's lock: exit $rc, expected 4"; }
one_error_line other.err "another run holds its lock (host elsewhere, pid [0-9]*, Slurm job 4242, since earlier)"
echo "ok: another Slurm job's lock -> exit 4"

# 3. This Slurm job's own earlier lock: waited for (released after 8 s), then the run goes on.
# The wait (retried every 2 s) is progress on rank 0 and a wait for rank 0 on rank 1: a watchdog
# of 4 s lets it be.
rm -f hold.out
hold 4242 8 > hold.out
start=$SECONDS
SLURM_JOB_ID=4242 run_np 2 train "${COMMON[@]}" "${short[@]}" -o Engine.watchdog_s=4 > same.log 2>&1 ||
  { cat same.log; fail "the requeued job's run failed"; }
wait $holder_pid 2> /dev/null || true
grep -q "waiting up to 180 s for the lock on first/checkpoints/.lock left by an earlier run of Slurm job 4242" same.log ||
  { cat same.log; fail "no waiting line"; }
[ $((SECONDS - start)) -ge 7 ] || fail "the run did not wait for the lock"
[ "$(latest_step first/checkpoints)" = $((MAX + 4)) ] || fail "the requeued run did not save step $((MAX + 4))"
echo "ok: this job's earlier lock is waited for, then the run resumes and saves"

# 4. A holder killed with SIGKILL leaves nothing behind.
rm -f hold.out
hold 4242 600 > hold.out
kill -9 $holder_pid; wait $holder_pid 2> /dev/null || true
start=$SECONDS
SLURM_JOB_ID=4242 run_np 1 train "${COMMON[@]}" -o Engine.max_steps=$((MAX + 8)) \
  -o Engine.output_dir=first --resume auto > killed.log 2>&1 || { cat killed.log; fail "run after a killed holder"; }
! grep -q "waiting up to" killed.log || fail "the run waited for a lock whose holder was killed"
"$TRAINER" inspect first/checkpoints > inspect_free.out 2>&1 || { cat inspect_free.out; fail "inspect after the runs"; }
grep -q "^  in use           no$" inspect_free.out || { cat inspect_free.out; fail "inspect: the folder should be free"; }
echo "ok: a SIGKILLed holder's lock is gone; inspect names a holder, and says when there is none"
echo "one run per checkpoint folder: refused beside a live run or another job, waits for its own job"
