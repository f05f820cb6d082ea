#!/usr/bin/env bash
# A stuck collective becomes an error, not a hang: rank 1 is frozen (SIGSTOP) mid-training, rank 0
# waits in an all-reduce, and its watchdog (Engine.watchdog_s=4) prints the phase and ends rank 0
# with exit code 1 (no MPI call from the watchdog's thread); mpirun then ends every rank, the
# frozen one too, well before the test's time limit. Rank 0 frozen while rank 1 waits for its
# part of a save: rank 1 ends after 10 x watchdog_s. Slow saves, loads and a long evaluation
# are progress, not stalls.
source "$(dirname "$0")/lib.sh"
# freeze_rank RANK: SIGSTOPs rank RANK of the run $launcher started, waits for mpirun to end;
# sets frozen (the pid), start (when it froze) and rc (mpirun's exit code). The rank of this run
# only: other tests may be training at the same time (ctest -j), so the process must also run in
# this test's folder.
freeze_rank() {
  frozen=""
  for pid in $(pgrep -f "$TRAINER train"); do
    [ "$(readlink /proc/$pid/cwd 2>/dev/null)" = "$(pwd -P)" ] || continue
    if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then frozen=$pid; fi
  done
  [ -n "$frozen" ] || { kill $launcher; fail "rank $1's process not found"; }
  kill -STOP "$frozen"
  start=$(date +%s)
  set +e
  wait $launcher
  rc=$?
  set -e
}
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
freeze_rank 1
rank1=$frozen
# Rank 1 must be gone (a zombie that nobody reaped yet is gone too) before it is continued.
rank1_state=$(awk '/^State:/ {print $2}' /proc/$rank1/status 2> /dev/null || true)
kill -CONT "$rank1" 2>/dev/null || true
[ -z "$rank1_state" ] || [ "$rank1_state" = Z ] ||
  { kill -9 "$rank1"; fail "rank 1 outlived mpirun (state $rank1_state)"; }
elapsed=$(( $(date +%s) - start ))
[ $rc -eq 1 ] || { cat run.err; fail "mpirun exited $rc after a rank froze, expected 1"; }
grep -q "no progress for .* in a training step (rank 0 .*Engine.watchdog_s=[0-9.]*).*raise Engine.watchdog_s$" run.err ||
  { cat run.err; fail "no watchdog line"; }
[ $elapsed -lt 60 ] || fail "the watchdog took ${elapsed}s"
echo "rank 1 frozen: the watchdog stopped the job after ${elapsed}s with exit code $rc:"
grep -m1 "no progress" run.err

# Rank 0 frozen while rank 1 waits for its part (a synchronous save, 200 ms a tensor): rank 0's
# own watchdog cannot end a stopped process, so rank 1 gives the wait 10 x Engine.watchdog_s=1
# and ends with a line naming rank 0 (it waited forever, silently).
TRAINER_FAULT_CHECKPOINT_SLOW=200 run_np 2 train -o Data.train_path=data.h5 -o Global.device=cpu \
  -o Model.hidden_size=32 -o Model.num_layers=2 -o Model.max_seq_len=32 -o Engine.max_steps=6 \
  -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Engine.save_steps=3 -o Checkpoint.async_save=false \
  -o Engine.output_dir=root -o Engine.watchdog_s=1 > root.out 2> root.err &
launcher=$!
for _ in $(seq 150); do  # wait until the save of step 3 is under way
  [ -d root/checkpoints/step-00000003.tmp ] && break
  sleep 0.1
done
[ -d root/checkpoints/step-00000003.tmp ] || { kill $launcher; cat root.err; fail "the save did not start"; }
freeze_rank 0
kill -CONT "$frozen" 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))
[ $rc -ne 0 ] || { cat root.err; fail "mpirun exited 0 with rank 0 frozen"; }
grep -q "no word from rank 0 for .* in rank 0's checkpoint write (rank 1 .* 10 x Engine.watchdog_s=1)" root.err ||
  { cat root.err; fail "no line from rank 1 about rank 0"; }
[ $elapsed -lt 60 ] || fail "the wait for rank 0 took ${elapsed}s"
echo "rank 0 frozen mid-save: rank 1 stopped the job after ${elapsed}s: $(grep -m1 'no word' root.err | cut -c1-150)..."

# A slow checkpoint is progress, not a stall: each tensor takes 60 ms to write, verify and read
# (TRAINER_FAULT_CHECKPOINT_SLOW, _READ_SLOW; ~5 s for the 84 tensors, more than watchdog_s=2).
# A synchronous save, then a resume (rank 0 verifies while rank 1 waits for it; both load) and a
# background save that the end of training waits for: both runs finish, no watchdog line.
SLOW=(-o Data.train_path=data.h5 -o Global.device=cpu -o Model.hidden_size=32
      -o Model.num_layers=2 -o Model.max_seq_len=32 -o Engine.logging_freq=1 -o Engine.eval_freq=0
      -o Engine.save_steps=4 -o Engine.output_dir=slow -o Engine.watchdog_s=2)
TRAINER_FAULT_CHECKPOINT_SLOW=60 run_np 2 train "${SLOW[@]}" -o Engine.max_steps=4 \
  -o Checkpoint.async_save=false > slow_save.log 2>&1 || { cat slow_save.log; fail "the slow synchronous save was stopped"; }
grep -q "saved checkpoint slow/checkpoints/step-00000004" slow_save.log || { cat slow_save.log; fail "no checkpoint at step 4"; }
TRAINER_FAULT_CHECKPOINT_SLOW=60 TRAINER_FAULT_CHECKPOINT_READ_SLOW=60 run_np 2 train "${SLOW[@]}" \
  -o Engine.max_steps=8 --resume auto > slow_resume.log 2>&1 || { cat slow_resume.log; fail "the slow resume or background save was stopped"; }
grep -q "resumed from slow/checkpoints/step-00000004 at step 4" slow_resume.log || { cat slow_resume.log; fail "did not resume from step 4"; }
grep -q "saved checkpoint slow/checkpoints/step-00000008" slow_resume.log || { cat slow_resume.log; fail "no checkpoint at step 8"; }
! grep -q "no progress" slow_save.log slow_resume.log || fail "a watchdog fired during a slow checkpoint"
echo "ok: ~5 s checkpoint save, verification, load and background write under Engine.watchdog_s=2"
# A synchronous save over two pipeline stages, 300 ms a tensor: stage 1's holder waits ~10 s in
# a send (the embedding's, past MPI's eager size) while rank 0 writes the tensors before it
# (awaiting rank 0, not stalled).
TRAINER_FAULT_CHECKPOINT_SLOW=300 run_np 2 train "${SLOW[@]}" -o Engine.max_steps=4 \
  -o Distributed.pp_degree=2 -o Engine.output_dir=slow_pp -o Checkpoint.async_save=false \
  > slow_pp.log 2>&1 || { cat slow_pp.log; fail "the slow synchronous save over pp2 was stopped"; }
grep -q "saved checkpoint slow_pp/checkpoints/step-00000004" slow_pp.log || { cat slow_pp.log; fail "no pp2 checkpoint"; }
echo "ok: ~25 s synchronous save over two pipeline stages under Engine.watchdog_s=2"
# Starting from a checkpoint's weights (Checkpoint.init_from) and from a LoRA base: ~3 s of
# reads (the 28 weight tensors at 100 ms each) under watchdog_s=2, in a folder of its own.
TRAINER_FAULT_CHECKPOINT_READ_SLOW=100 run_np 2 train "${SLOW[@]}" -o Engine.output_dir=slow_init \
  -o Checkpoint.init_from=slow/checkpoints/step-00000008 -o Engine.max_steps=1 -o Engine.save_steps=0 \
  > slow_init.log 2>&1 || { cat slow_init.log; fail "the slow init_from load was stopped"; }
TRAINER_FAULT_CHECKPOINT_READ_SLOW=100 run_np 2 train "${SLOW[@]}" -o Engine.output_dir=slow_lora \
  -o Checkpoint.init_from=slow/checkpoints/step-00000008 -o Engine.max_steps=1 -o Engine.save_steps=0 \
  -o Model.lora_rank=2 > slow_lora.log 2>&1 || { cat slow_lora.log; fail "the slow LoRA base load was stopped"; }
! grep -q "no progress" slow_init.log slow_lora.log || fail "a watchdog fired during a slow weights load"
echo "ok: ~3 s loads of initial weights and of a LoRA base under Engine.watchdog_s=2"
# A long evaluation is progress: 12000 validation batches (~6 s) under watchdog_s=2.
run_np 2 train "${SLOW[@]}" -o Engine.output_dir=long_eval -o Engine.max_steps=2 -o Engine.save_steps=0 \
  -o Data.val_fraction=0.1 -o Engine.eval_freq=2 -o Engine.eval_iters=12000 > long_eval.log 2>&1 ||
  { cat long_eval.log; fail "the long evaluation was stopped"; }
grep -q "val loss" long_eval.log || { cat long_eval.log; fail "no val loss"; }
echo "ok: a ~6 s evaluation of 12000 batches under Engine.watchdog_s=2"
