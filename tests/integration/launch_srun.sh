#!/usr/bin/env bash
# The real trainer started by Slurm itself, `srun --mpi=pmix -n 2`, in the local one-node cluster
# (scripts/slurm_local_cluster.sh):
#   1. `trainer check` passes: the MPI world holds the 2 tasks srun started, every group's
#      all-reduce is exact, and the verdict line ends it;
#   2. a 10-step `trainer train` of a shrunken configs/tiny-cpu.yaml logs the same losses
#      (relative 1e-5) and writes the same checkpoint as a plain 2-rank mpiexec run.
# Stops the cluster on any exit. Skips (77) without root or Slurm.
# Arguments: $1 trainer binary, $2 source dir, $3 scratch dir.
set -uo pipefail
trainer=$1 src=$2 scratch=$3
# shellcheck source=tests/integration/slurm_lib.sh
source "$src/tests/integration/slurm_lib.sh"

require_root
require_tools munged slurmctld slurmd sinfo srun scontrol
"$trainer" train --help >/dev/null 2>&1 || skip "$trainer has no train subcommand"
fresh_scratch
make_text_dataset "$scratch/data.h5"
start_local_cluster "$scratch/cluster"
export OMP_NUM_THREADS=1

# 1. trainer check under srun.
timeout --kill-after=5 60 srun --mpi=pmix -n 2 "$trainer" check -c "$src/configs/tiny-cpu.yaml" \
  -o Data.train_path="$scratch/data.h5" -o Engine.output_dir="$scratch/check" >"$scratch/check.out" 2>&1 ||
  fail "srun --mpi=pmix -n 2 trainer check failed: $(tail -n 30 "$scratch/check.out")"
grep -qE "^MPI world: 2 ranks, as the launcher started \([A-Z_]+=2\)$" "$scratch/check.out" ||
  fail "trainer check did not find the 2 tasks of srun in one MPI world (see $scratch/check.out)"
grep -qE "^checkpoint folder $scratch/check/checkpoints: shared by every rank" "$scratch/check.out" ||
  fail "trainer check under srun did not check the checkpoint folder (see $scratch/check.out)"
grep -qE "^all-reduce on world: 1 group of 2 ranks .*: exact;" "$scratch/check.out" ||
  fail "no exact all-reduce on the world (see $scratch/check.out)"
grep -qE "^works well on 2 ranks \(1 host, 0 GPUs\)$" "$scratch/check.out" ||
  fail "no verdict line (see $scratch/check.out)"
echo "ok: srun --mpi=pmix -n 2 trainer check: $(grep '^MPI world' "$scratch/check.out"); $(grep '^works well' "$scratch/check.out")"

# 2. trainer train under srun, against mpiexec.
steps=10
set_tiny_train_args "$scratch/data.h5" "$steps"
run_reference "$scratch/mpiexec"
timeout --kill-after=5 60 srun --mpi=pmix -n 2 "$trainer" "${args[@]}" \
  -o Engine.output_dir="$scratch/srun" >"$scratch/srun.out" 2>&1 ||
  fail "srun --mpi=pmix -n 2 trainer train failed: $(tail -n 20 "$scratch/srun.out")"
grep -q "^rank map (2 ranks" "$scratch/srun.out" || fail "the srun run was not one world of 2 ranks (see $scratch/srun.out)"
expect_same_run "$scratch/srun" "$scratch/mpiexec" "$steps" "the srun run"
echo "ok: srun --mpi=pmix -n 2 trainer train: losses and checkpoint equal to mpiexec -n 2"
echo "PASS"
