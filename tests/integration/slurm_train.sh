#!/usr/bin/env bash
# slurm/train.sbatch on the local Slurm cluster with the real trainer (CPU, 2 ranks, a shrunken
# configs/tiny-cpu.yaml on text packed by `trainer pack`):
#   1. sbatch --wait of a 20-step run: the job completes, logs, and leaves checkpoints step-10 and
#      step-20 plus `latest`.
#   2. preemption: a running job gets SIGUSR1 (as Slurm sends it before the time limit), the ranks
#      save and exit 75, train.sbatch requeues the job, the second run resumes with --resume auto
#      and finishes: the job ends COMPLETED after 1 restart, with the preemption's checkpoint
#      (0 < step < max) and the final one.
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

# Three generated text documents (~200 KB), packed with the byte tokenizer.
for doc in 1 2 3; do
  for line in $(seq 1 1500); do
    echo "document $doc line $line: the quick brown fox jumps over the lazy dog $((line * doc % 97))"
  done >"$scratch/doc$doc.txt"
done
"$trainer" pack --input "$scratch"/doc1.txt "$scratch"/doc2.txt "$scratch"/doc3.txt \
  --output "$scratch/data.h5" >"$scratch/pack.out" 2>&1 || fail "trainer pack failed: $(tail -n 5 "$scratch/pack.out")"

start_local_cluster "$scratch/cluster"
export TRAINER_BIN=$trainer

# A small model so that each step takes milliseconds on two CPU ranks.
common=(-o Data.train_path="$scratch/data.h5" -o Model.hidden_size=64 -o Model.num_layers=2
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

# 1. A plain run with sbatch --wait.
run1=$scratch/run1
job=$(timeout 120 sbatch --wait --parsable --ntasks=2 --chdir="$scratch" --output="$scratch/train-%j.out" \
  "$src/slurm/train.sbatch" "$config" "${common[@]}" -o Engine.max_steps=20 -o Engine.save_steps=10 \
  -o Engine.output_dir="$run1")
rc=$?
log=$scratch/train-$job.out
[[ $rc -eq 0 ]] || fail "sbatch --wait of train.sbatch exited $rc: $(tail -n 20 "$log" 2>/dev/null)"
grep -q "train.sbatch .*job $job: exit 0$" "$log" || fail "the job log has no 'exit 0' line (see $log)"
[[ $(job_field "$job" JobState) == COMPLETED ]] || fail "job $job ended $(job_field "$job" JobState)"
steps=$(checkpoint_steps "$run1/checkpoints" | paste -sd' ')
[[ $steps == "10 20" ]] || fail "expected checkpoints step-10 and step-20 in $run1/checkpoints, found '$steps'"
[[ -e $run1/checkpoints/latest ]] || fail "$run1/checkpoints/latest is missing"
[[ -s $run1/metrics.jsonl ]] || fail "$run1/metrics.jsonl is missing or empty"
echo "ok: sbatch --wait train.sbatch: 20 steps, checkpoints $steps"

# 2. Preemption: USR1 to the batch script mid-run, exit 75, requeue, resume, finish.
run2=$scratch/run2
max_steps=100
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
echo "PASS"
