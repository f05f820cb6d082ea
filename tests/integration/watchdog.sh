#!/usr/bin/env bash
# A stuck collective becomes an error, not a hang: rank 1 is frozen (SIGSTOP) mid-training, rank 0
# waits in an all-reduce, and its watchdog (Engine.watchdog_s=4) prints the phase and stops
# every rank through MPI_Abort well before the test's time limit.
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
set +e
run_np 2 train -o Data.train_path=data.h5 -o Global.device=cpu -o Model.hidden_size=32 \
  -o Model.num_layers=2 -o Model.max_seq_len=32 -o Engine.max_steps=100000 \
  -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Engine.save_steps=0 -o Engine.output_dir=run \
  -o Engine.watchdog_s=4 > run.out 2> run.err &
launcher=$!
set -e
for _ in $(seq 100); do  # wait until training runs
  [ -s run/metrics.jsonl ] && break
  sleep 0.2
done
[ -s run/metrics.jsonl ] || { kill $launcher; cat run.err; fail "training did not start"; }
# Rank 1 of this run only: other tests may be training at the same time (ctest -j), so the
# process must also run in this test's folder.
rank1=""
for pid in $(pgrep -f "$TRAINER train"); do
  [ "$(readlink /proc/$pid/cwd 2>/dev/null)" = "$(pwd -P)" ] || continue
  if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then rank1=$pid; fi
done
[ -n "$rank1" ] || { kill $launcher; fail "rank 1's process not found"; }
kill -STOP "$rank1"
start=$(date +%s)
set +e
wait $launcher
rc=$?
set -e
kill -CONT "$rank1" 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))
[ $rc -ne 0 ] || fail "mpirun exited 0 after a rank froze"
grep -q "no progress for .* in a training step (rank 0" run.err || { cat run.err; fail "no watchdog line"; }
[ $elapsed -lt 60 ] || fail "the watchdog took ${elapsed}s"
echo "rank 1 frozen: the watchdog stopped the job after ${elapsed}s with exit code $rc:"
grep -m1 "no progress" run.err
