#!/usr/bin/env bash
# The real trainer launched with `mpirun --hostfile` (slurm/mpirun_hostfile.sh) across two hosts
# made of network namespaces (scripts/netns_hosts.sh), one rank on each: a 10-step run of a
# shrunken configs/tiny-cpu.yaml must log the same losses (relative 1e-5) and write the same
# checkpoint as a plain 2-rank mpiexec run on this machine. Deletes every namespace it made, even
# on failure. Skips (77) without root or `ip netns`.
# Arguments: $1 trainer binary, $2 source dir, $3 scratch dir.
set -uo pipefail
trainer=$1 src=$2 scratch=$3
# shellcheck source=tests/integration/slurm_lib.sh
source "$src/tests/integration/slurm_lib.sh"

require_root
"$trainer" train --help >/dev/null 2>&1 || skip "$trainer has no train subcommand"
fresh_scratch
make_text_dataset "$scratch/data.h5"
start_netns_hosts
export OMP_NUM_THREADS=1

steps=10
set_tiny_train_args "$scratch/data.h5" "$steps"
run_reference "$scratch/local"  # 2 ranks on this host

# The same over the two namespace hosts.
on_netns_hosts "$trainer" "${args[@]}" -o Engine.output_dir="$scratch/hosts" >"$scratch/hosts.out" 2>&1 ||
  fail "the run over $host1 and $host2 failed: $(tail -n 20 "$scratch/hosts.out")"
grep -qE "^  rank +0  host $host1 " "$scratch/hosts.out" || fail "rank 0 did not run on $host1 (see $scratch/hosts.out)"
grep -qE "^  rank +1  host $host2 " "$scratch/hosts.out" || fail "rank 1 did not run on $host2 (see $scratch/hosts.out)"
echo "ok: mpirun --hostfile ran rank 0 on $host1 and rank 1 on $host2"

expect_same_run "$scratch/hosts" "$scratch/local" "$steps" "the run over two hosts"
echo "ok: losses and checkpoint equal to the single-host 2-rank run"
echo "PASS"
