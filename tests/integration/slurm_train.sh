#!/usr/bin/env bash
# slurm/pack.sbatch and slurm/train.sbatch on the local Slurm cluster with the real trainer (CPU,
# 2 ranks, a shrunken configs/tiny-cpu.yaml on text packed by `trainer pack`):
#   0. sbatch --wait --array=0-1 of pack.sbatch over three text files: two shards, each equal to a
#      `trainer pack` of its files (task 0: the first and third, task 1: the second); the runs
#      below train on the shards' glob.
#   1. sbatch --wait of an uninterrupted 100-step run: the job completes, logs, and leaves
#      checkpoints step-50 and step-100 plus `latest`.
#   2. preemption: the same run in a job that gets SIGUSR1 (as Slurm sends it before the time
#      limit); the ranks save and exit 75, train.sbatch requeues the job, the second run resumes
#      with --resume auto and finishes: the job ends COMPLETED after 1 restart, with the
#      preemption's checkpoint (0 < step < max) and the final one. Its losses, those after the
#      resume and the final one included, equal the uninterrupted run's (relative 1e-5).
# Skips (77) without root or Slurm, or while the trainer lacks `train` (or the tiny config).
# Arguments: $1 trainer binary, $2 source dir, $3 scratch dir.
set -uo pipefail
trainer=$1 src=$2 scratch=$3
# shellcheck source=tests/integration/slurm_lib.sh
source "$src/tests/integration/slurm_lib.sh"

require_root
require_tools munged slurmctld slurmd sinfo srun sbatch scontrol scancel
"$trainer" --help >/dev/null 2>&1 || skip "$trainer --help fails (trainer not built yet)"
"$trainer" train --help >/dev/null 2>&1 || skip "$trainer has no train subcommand yet"
"$trainer" pack --help >/dev/null 2>&1 || skip "$trainer has no pack subcommand yet"
config=$src/configs/tiny-cpu.yaml
[[ -f $config ]] || skip "$config does not exist yet"

fresh_scratch
make_text_dataset "$scratch/data.h5"

start_local_cluster "$scratch/cluster"
export TRAINER_BIN=$trainer

# 0. Packing in a job array.
timeout 120 sbatch --wait --parsable --array=0-1 --chdir="$scratch" --output="$scratch/pack-%A_%a.out" \
  "$src/slurm/pack.sbatch" "$scratch/doc*.txt" "$scratch/shards" >/dev/null ||
  fail "sbatch --wait --array=0-1 of pack.sbatch failed: $(tail -n 5 "$scratch"/pack-*.out 2>/dev/null)"
"$trainer" pack --input "$scratch/doc1.txt" "$scratch/doc3.txt" --output "$scratch/expect-0.h5" >/dev/null 2>&1
"$trainer" pack --input "$scratch/doc2.txt" --output "$scratch/expect-1.h5" >/dev/null 2>&1
for i in 0 1; do
  h5dump -d /tokens -b LE -o "$scratch/shard-$i.bin" "$scratch/shards/shard-0000$i.h5" >/dev/null &&
    h5dump -d /tokens -b LE -o "$scratch/expect-$i.bin" "$scratch/expect-$i.h5" >/dev/null &&
    cmp -s "$scratch/shard-$i.bin" "$scratch/expect-$i.bin" ||
    fail "shard $i of pack.sbatch differs from a trainer pack of its files"
done
echo "ok: sbatch --array=0-1 pack.sbatch: 2 shards, each its files' trainer pack"

# A small model so that each step takes milliseconds on two CPU ranks.
common=(-o Data.train_path="$scratch/shards/shard-*.h5" -o Model.hidden_size=64 -o Model.num_layers=2
        -o Model.num_heads=4 -o Model.max_seq_len=64 -o Model.seq_len=64 -o Global.global_batch_size=8
        -o Global.micro_batch_size=4 -o Engine.eval_freq=0 -o Engine.logging_freq=1
        -o Checkpoint.keep_last=0)

# checkpoint_steps DIR: the N of every committed step-N folder (N may be zero-padded), ascending.
checkpoint_steps() {
  local dir name
  for dir in "$1"/step-*; do
    name=${dir##*/step-}
    [[ -d $dir && $name =~ ^[0-9]+$ ]] && echo $((10#$name))
  done | sort -n
}

# 1. An uninterrupted run with sbatch --wait: the reference of the preempted one.
run1=$scratch/run1
max_steps=100
job=$(timeout 120 sbatch --wait --parsable --ntasks=2 --chdir="$scratch" --output="$scratch/train-%j.out" \
  "$src/slurm/train.sbatch" "$config" "${common[@]}" -o Engine.max_steps=$max_steps \
  -o Engine.save_steps=$((max_steps / 2)) -o Engine.output_dir="$run1")
rc=$?
log=$scratch/train-$job.out
[[ $rc -eq 0 ]] || fail "sbatch --wait of train.sbatch exited $rc: $(tail -n 20 "$log" 2>/dev/null)"
grep -q "train.sbatch .*job $job: exit 0$" "$log" || fail "the job log has no 'exit 0' line (see $log)"
[[ $(job_field "$job" JobState) == COMPLETED ]] || fail "job $job ended $(job_field "$job" JobState)"
steps=$(checkpoint_steps "$run1/checkpoints" | paste -sd' ')
[[ $steps == "$((max_steps / 2)) $max_steps" ]] ||
  fail "expected checkpoints step-$((max_steps / 2)) and step-$max_steps in $run1/checkpoints, found '$steps'"
[[ -e $run1/checkpoints/latest ]] || fail "$run1/checkpoints/latest is missing"
[[ $(step_losses "$run1/metrics.jsonl" | wc -l) -eq $max_steps ]] ||
  fail "$run1/metrics.jsonl does not hold $max_steps training records"
echo "ok: sbatch --wait train.sbatch: $max_steps steps, checkpoints $steps"

# 2. Preemption: USR1 to the batch script mid-run, exit 75, requeue, resume, finish.
run2=$scratch/run2
job=$(sbatch --parsable --ntasks=2 --chdir="$scratch" --output="$scratch/train-%j.out" \
  "$src/slurm/train.sbatch" "$config" "${common[@]}" -o Engine.max_steps=$max_steps \
  -o Engine.save_steps=$max_steps -o Engine.output_dir="$run2") || fail "sbatch of train.sbatch failed"
log=$scratch/train-$job.out
add_cleanup "scancel $job 2>/dev/null"

# Wait until training has logged a few steps, then signal the batch script as Slurm would.
logged_steps() { { wc -l <"$run2/metrics.jsonl"; } 2>/dev/null || echo 0; }
deadline=$((SECONDS + 60))
while [[ $SECONDS -lt $deadline ]]; do
  [[ $(logged_steps) -ge 3 ]] && break
  job_active "$job" || fail "job $job ended $(job_field "$job" JobState) before it was signalled (see $log)"
  sleep 0.2
done
[[ $(logged_steps) -ge 3 ]] || fail "no training progress within 60 s (see $log)"
scancel --batch --signal=USR1 "$job" || fail "scancel --signal=USR1 $job failed"

# The requeued job waits for its begin time (Slurm adds about two minutes); once the old step is
# gone from this node, let it start now.
deadline=$((SECONDS + 150))
while [[ $SECONDS -lt $deadline ]]; do
  state=$(job_field "$job" JobState)
  restarts=$(job_field "$job" Restarts)
  if [[ $state == PENDING && ${restarts:-0} -ge 1 ]] && ! pgrep -f "slurmstepd: \[$job\." >/dev/null; then
    scontrol update JobId="$job" StartTime=now 2>/dev/null
  fi
  job_active "$job" || break
  sleep 0.2
done
state=$(job_field "$job" JobState)
[[ $state == COMPLETED ]] || fail "preempted job $job ended '$state' (see $log)"
[[ $(job_field "$job" Restarts) == 1 ]] || fail "job $job restarted $(job_field "$job" Restarts) times, expected 1"
grep -q "exit 75 (preempted, checkpoint saved): requeueing" "$log" || fail "train.sbatch did not requeue on exit 75 (see $log)"
grep -q "restart 1 on .*--resume auto" "$log" || fail "the requeued run did not use --resume auto (see $log)"
grep -q "train.sbatch .*job $job: exit 0$" "$log" || fail "the resumed run did not exit 0 (see $log)"
steps=$(checkpoint_steps "$run2/checkpoints")
[[ $(tail -n 1 <<<"$steps") == "$max_steps" ]] || fail "no final checkpoint step-$max_steps (found: ${steps//$'\n'/ })"
preempt_step=$(head -n 1 <<<"$steps")
[[ $preempt_step -gt 0 && $preempt_step -lt $max_steps ]] ||
  fail "no checkpoint from the preemption (0 < step < $max_steps) in $run2/checkpoints (found: ${steps//$'\n'/ })"
# metrics.jsonl gets both runs' records: a resumed run does not log step 1 again.
first_steps=$(grep -cE '"step": ?1[,}]' "$run2/metrics.jsonl")
[[ $first_steps -eq 1 ]] || fail "step 1 was logged $first_steps times in $run2/metrics.jsonl: the requeued run started over instead of resuming"
echo "ok: preempted at step $preempt_step, requeued, resumed, finished at step $max_steps"

# The preempted and resumed run computed what the uninterrupted one did.
[[ $(step_losses "$run2/metrics.jsonl" | wc -l) -eq $max_steps ]] ||
  fail "$run2/metrics.jsonl does not hold $max_steps training records (one per step)"
echo -n "all steps: "
compare_step_losses "$run2/metrics.jsonl" "$run1/metrics.jsonl" 1e-5 ||
  fail "the preempted run's losses differ from the uninterrupted run's"
echo -n "after the resume: "
compare_step_losses "$run2/metrics.jsonl" "$run1/metrics.jsonl" 1e-5 $((preempt_step + 1)) ||
  fail "the losses after the resume differ from the uninterrupted run's"
final=$(step_losses "$run2/metrics.jsonl" | awk -v s=$max_steps '$1 == s {print $2}')
final_reference=$(step_losses "$run1/metrics.jsonl" | awk -v s=$max_steps '$1 == s {print $2}')
echo "ok: final loss $final after preemption and resume, $final_reference uninterrupted"
echo "PASS"
