#!/usr/bin/env bash
# A real one-node Slurm cluster: starts it, runs the MPI hello program with `srun --mpi=pmix -n 2`
# and with `sbatch --wait` of a script that calls `mpirun --oversubscribe -n 2`, checks that two
# distinct ranks of one world of 2 ran (and that their all-reduce agreed), then stops the cluster
# and checks that no daemon is left. Skips (77) without root or Slurm.
# Arguments: $1 trainer binary (unused), $2 source dir, $3 scratch dir.
set -uo pipefail
# shellcheck disable=SC2034  # the trainer is not needed here
trainer=$1 src=$2 scratch=$3
# shellcheck source=tests/integration/slurm_lib.sh
source "$src/tests/integration/slurm_lib.sh"

require_root
require_tools munged slurmctld slurmd sinfo srun sbatch scontrol mpicc mpirun
fresh_scratch

hello=$scratch/mpi_hello
build_mpi_hello "$hello"
state=$scratch/cluster
start_local_cluster "$state"

# check_hello FILE WHAT: two lines from ranks 0 and 1 of a world of 2, distinct PIDs, correct sum.
check_hello() {
  local file=$1 what=$2
  grep -q '^hello rank 0 of 2 on .* rank_sum 1$' "$file" || fail "$what: no line from rank 0 of 2 (see $file)"
  grep -q '^hello rank 1 of 2 on .* rank_sum 1$' "$file" || fail "$what: no line from rank 1 of 2 (see $file)"
  [[ $(grep -c '^hello rank ' "$file") -eq 2 ]] || fail "$what: expected exactly 2 hello lines (see $file)"
  local pids
  pids=$(grep '^hello rank ' "$file" | sed -E 's/.* pid ([0-9]+) .*/\1/' | sort -u | wc -l)
  [[ $pids -eq 2 ]] || fail "$what: the two ranks share a PID (see $file)"
  echo "ok: $what"
}

# 1. srun with PMIx: Slurm itself starts the two ranks.
timeout 30 srun --mpi=pmix -n 2 "$hello" >"$scratch/srun.out" 2>&1 ||
  fail "srun --mpi=pmix -n 2 failed: $(tail -n 5 "$scratch/srun.out")"
check_hello "$scratch/srun.out" "srun --mpi=pmix -n 2"

# 2. sbatch --wait of a batch script in which mpirun reads the allocation and starts the ranks.
cat >"$scratch/hello.sbatch" <<JOB
#!/bin/bash
#SBATCH --job-name=hello
#SBATCH --ntasks=2
#SBATCH --output=$scratch/hello-%j.out
echo "job \$SLURM_JOB_ID on \$SLURM_JOB_NODELIST with \$SLURM_NTASKS tasks"
mpirun --oversubscribe -n 2 "$hello"
JOB
job=$(timeout 60 sbatch --wait --parsable "$scratch/hello.sbatch") || fail "sbatch --wait failed (job ${job:-?})"
log=$scratch/hello-$job.out
[[ -f $log ]] || fail "sbatch: the job log $log was not written"
grep -q "^job $job on .* with 2 tasks$" "$log" || fail "sbatch: the job did not see its allocation (see $log)"
check_hello "$log" "sbatch --wait + mpirun --oversubscribe -n 2"
[[ $(job_field "$job" JobState) == COMPLETED && $(job_field "$job" ExitCode) == 0:0 ]] ||
  fail "sbatch: job $job ended $(job_field "$job" JobState) $(job_field "$job" ExitCode)"

# 3. stop: every daemon this test started is gone.
pids=$(cat "$state"/munged.pid "$state"/slurmctld.pid "$state"/slurmd.pid)
bash "$src/scripts/slurm_local_cluster.sh" stop "$state" >/dev/null || fail "stopping the cluster failed"
for pid in $pids; do
  kill -0 "$pid" 2>/dev/null && fail "daemon $pid still runs after stop"
done
bash "$src/scripts/slurm_local_cluster.sh" status "$state" >/dev/null && fail "status says the cluster still runs"
echo "ok: cluster stopped"
echo "PASS"
