#!/usr/bin/env bash
# slurm/train.sbatch, slurm/pack.sbatch and slurm/mpirun_hostfile.sh outside Slurm, with the
# environment Slurm gives a job (no daemons: what slurm_train.sh's one-node cluster cannot stage):
# - a requeued train.sbatch run (SLURM_RESTART_COUNT=1) branched from another run's checkpoint
#   (TRAINER_RESUME) resumes from that checkpoint again while its own folder holds none, and with
#   auto once it does (restart 2);
# - relative paths are the job's working folder's, not SLURM_SUBMIT_DIR's (sbatch --chdir);
# - TRAINER_LAUNCHER=mpirun without SLURM_NTASKS adds no -n of its own;
# - pack.sbatch tasks run again with --array=1,3 after --array=0-3 write the shards they wrote
#   before; an array from 1 without PACK_SHARDS, and a count unlike the recorded one, are refused;
# - SIGHUP to mpirun_hostfile.sh (a closed terminal) makes the ranks save and exit 75.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"  # line_count
make_small_dataset data.h5
TINY=(-c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=data.h5 -o Data.val_fraction=0
      -o Model.hidden_size=32 -o Model.num_layers=2 -o Model.num_heads=2 -o Model.max_seq_len=16
      -o Global.global_batch_size=2 -o Global.micro_batch_size=2 -o Engine.logging_freq=1
      -o Engine.eval_freq=0 -o Engine.save_steps=1)
run_np 1 train "${TINY[@]}" -o Engine.max_steps=2 -o Engine.output_dir=base > base.log 2>&1 ||
  { tail -20 base.log; fail "the base run"; }

# train.sbatch as a requeued job would run it (a submit folder that is not the working folder).
requeued() {  # restart max_steps log
  env -u SLURM_NTASKS SLURM_JOB_ID=7 SLURM_SUBMIT_DIR=/nonexistent SLURM_RESTART_COUNT="$1" \
    TRAINER_BIN="$TRAINER" TRAINER_LAUNCHER=mpirun TRAINER_LAUNCH_ARGS="-n 1 --oversubscribe" \
    TRAINER_RESUME=base/checkpoints/step-00000001 \
    timeout 120 bash "$SRC/slurm/train.sbatch" "$SRC/configs/tiny-cpu.yaml" "${TINY[@]:2}" \
    -o Engine.max_steps="$2" -o Engine.output_dir=branch > "$3" 2>&1 ||
    { tail -20 "$3"; fail "train.sbatch, restart $1: exit $?"; }
}
requeued 1 3 restart1.log
grep -q "resumed from base/checkpoints/step-00000001 at step 1" restart1.log ||
  { cat restart1.log; fail "restart 1 before any save of its own did not take TRAINER_RESUME"; }
grep -q ": mpirun --bind-to none -n 1 --oversubscribe $TRAINER train" restart1.log ||
  { grep "train.sbatch" restart1.log; fail "the mpirun line is not the launch arguments' alone"; }
requeued 2 4 restart2.log
grep -q "resumed from branch/checkpoints/step-00000003 at step 3" restart2.log ||
  { cat restart2.log; fail "restart 2 did not resume its own checkpoint (auto)"; }
echo "ok: a requeued branch resumes TRAINER_RESUME until it saved, then its own checkpoints"

# pack.sbatch as array tasks: --array=0-3, then tasks 1 and 3 again as --array=1,3.
mkdir -p corpus
for i in $(seq 0 7); do printf 'document %d of eight\n%s\n' "$i" "$(seq "$i" 40)" > corpus/f$i.txt; done
pack_task() {  # id min max [env...]: into shards/ (OUTPUT=DIR elsewhere)
  local id=$1 min=$2 max=$3
  shift 3
  env SLURM_ARRAY_TASK_ID="$id" SLURM_ARRAY_TASK_MIN="$min" SLURM_ARRAY_TASK_MAX="$max" \
    SLURM_ARRAY_TASK_COUNT=$((max - min + 1)) SLURM_SUBMIT_DIR=/nonexistent TRAINER_BIN="$TRAINER" \
    "$@" bash "$SRC/slurm/pack.sbatch" 'corpus/*.txt' "${OUTPUT:-shards}"
}
for i in 0 1 2 3; do pack_task "$i" 0 3 > "pack$i.log" 2>&1 || { cat "pack$i.log"; fail "pack task $i"; }; done
for i in 1 3; do h5dump -d /tokens "shards/shard-0000$i.h5" > "first$i.txt"; done
rm shards/shard-00001.h5 shards/shard-00003.h5
pack_task 1 1 3 > again1.log 2>&1 && pack_task 3 1 3 > again3.log 2>&1 ||
  { cat again1.log again3.log; fail "pack tasks 1 and 3 again"; }
[ "$(cd shards && echo shard-*)" = "shard-00000.h5 shard-00001.h5 shard-00002.h5 shard-00003.h5" ] ||
  { ls shards; fail "after --array=1,3 the shards are not 0 to 3"; }
for i in 1 3; do
  h5dump -d /tokens "shards/shard-0000$i.h5" | diff -q "first$i.txt" - > /dev/null ||
    fail "shard $i packed again holds other tokens"
done
set +e
OUTPUT=fresh pack_task 1 1 4 > from_one.log 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "would leave shards out" from_one.log ||
  { cat from_one.log; fail "an array from 1 without PACK_SHARDS: exit $rc"; }
set +e
pack_task 0 0 1 PACK_SHARDS=2 > other_count.log 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "was packed in 4 shards, not 2" other_count.log ||
  { cat other_count.log; fail "another shard count into the same folder: exit $rc"; }
echo "ok: pack.sbatch tasks run again write their own shards; arrays that skip shards refused"

# SIGHUP to mpirun_hostfile.sh: passed on as SIGUSR1, the ranks save and it exits 75.
trap 'pkill -f "Engine.output_dir=hangup" 2> /dev/null || true' EXIT
echo "localhost slots=1" > hosts
MPIRUN="$MPIEXEC" bash "$SRC/slurm/mpirun_hostfile.sh" -H hosts -- "$TRAINER" train "${TINY[@]}" \
  -o Engine.max_steps=100000 -o Engine.save_steps=100000 -o Engine.output_dir=hangup > hangup.log 2>&1 &
wrapper=$!
await $wrapper hangup.log '[ "$(line_count hangup/metrics.jsonl)" -ge 3 ]'
kill -HUP $wrapper
wait_exit $wrapper
[ $rc -eq 75 ] && grep -q "stopped by SIGUSR1 after step" hangup.log ||
  { tail -20 hangup.log; fail "SIGHUP to mpirun_hostfile.sh: exit $rc, expected 75 with a checkpoint"; }
echo "ok: SIGHUP to mpirun_hostfile.sh -> the ranks saved, exit 75"
echo "PASS: batch scripts"
