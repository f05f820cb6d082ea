#!/usr/bin/env bash
# `trainer check` across two hosts made of network namespaces (scripts/netns_hosts.sh), one rank
# on each, started by slurm/mpirun_hostfile.sh:
#   1. with the checkpoint folder and the data on the file system both hosts share, it passes and
#      ends with "works well on 2 ranks (2 hosts, 0 GPUs)";
#   2. with the checkpoint folder unshared (host2 mounts an empty tmpfs over it, in its own mount
#      namespace: TRAINER_NETNS_PRIVATE_DIRS), it exits 5 naming rank 1, host2 and the check;
#   3. with the data folder hidden the same way on host2 (the data file is missing there), it
#      exits 5 naming rank 1, host2 and the data file, and says that rank 0 opens it.
# Deletes every namespace it made, even on failure. Skips (77) without root or `ip netns`.
# Arguments: $1 trainer binary, $2 source dir, $3 scratch dir.
set -uo pipefail
trainer=$1 src=$2 scratch=$3
# shellcheck source=tests/integration/slurm_lib.sh
source "$src/tests/integration/slurm_lib.sh"

require_root
"$trainer" check --help >/dev/null 2>&1 || skip "$trainer has no check subcommand"
fresh_scratch
mkdir -p "$scratch/data" "$scratch/ckpt"
make_text_dataset "$scratch/data/data.h5"
start_netns_hosts
export OMP_NUM_THREADS=1

args=(check -c "$src/configs/tiny-cpu.yaml" -o Data.train_path="$scratch/data/data.h5"
      -o Checkpoint.dir="$scratch/ckpt")

# run_check NAME CODE: the check over both hosts; exit code CODE expected, output in NAME.out.
run_check() {
  local name=$1 code=$2 rc=0
  on_netns_hosts "$trainer" "${args[@]}" >"$scratch/$name.out" 2>&1 || rc=$?
  [[ $rc -eq $code ]] || fail "$name: exit code $rc, expected $code: $(tail -n 30 "$scratch/$name.out")"
}
expect_line() {
  grep -qE -- "$2" "$scratch/$1.out" || fail "$1: no line matching /$2/ in: $(cat "$scratch/$1.out")"
}
refuse_line() {
  grep -qE -- "$2" "$scratch/$1.out" && fail "$1: unexpected line /$2/ in: $(cat "$scratch/$1.out")"
  return 0
}

# 1. Everything shared.
run_check shared 0
expect_line shared "^  rank +0  host $host1 "
expect_line shared "^  rank +1  host $host2 "
expect_line shared "^checkpoint folder $scratch/ckpt: shared by every rank"
expect_line shared "^data file $scratch/data/data.h5: opens on every rank"
expect_line shared "^all-reduce on world: 1 group of 2 ranks \(MPI, host memory, 4.0 MiB per call\): exact; bus bandwidth [0-9.]+ GB/s$"
expect_line shared "^works well on 2 ranks \(2 hosts, 0 GPUs\)$"
echo "ok: shared folder and data on 2 hosts: $(grep '^all-reduce on world' "$scratch/shared.out")"

# 2. host2 sees a checkpoint folder of its own.
TRAINER_NETNS_PRIVATE_DIRS=$host2:$scratch/ckpt run_check unshared_folder 5
expect_line unshared_folder "^error: checkpoint folder \(rank 1 on $host2\): $scratch/ckpt is not the folder that rank 0 on $host1 sees: neither sees the probe file the other wrote\. Put Checkpoint.dir"
refuse_line unshared_folder "^error: checkpoint folder \(rank 0"
refuse_line unshared_folder "^error: data file"
expect_line unshared_folder "^error: trainer check \(2 ranks, 2 hosts\): 1 failure \(checkpoint folder\) on 1 of 2 ranks \(1; $host2\)"
[[ -z $(find "$scratch/ckpt" -name '.trainer-check-*') ]] || fail "probe files left in $scratch/ckpt"
echo "ok: unshared checkpoint folder -> exit 5: $(grep -m1 '^error: checkpoint folder' "$scratch/unshared_folder.out" | cut -c1-120)..."

# 3. The data file is missing on host2.
TRAINER_NETNS_PRIVATE_DIRS=$host2:$scratch/data run_check missing_data 5
expect_line missing_data "^error: data file \(rank 1 on $host2\): dataset file not found \($scratch/data/data.h5\): no such file\..*; the file opens on rank 0 on $host1: put it on a file system that every host mounts"
refuse_line missing_data "^error: data file \(rank 0"
refuse_line missing_data "^error: checkpoint folder"
expect_line missing_data "^error: trainer check \(2 ranks, 2 hosts\): 1 failure \(data file\) on 1 of 2 ranks \(1; $host2\)"
echo "ok: data missing on one host -> exit 5: $(grep -m1 '^error: data file' "$scratch/missing_data.out" | cut -c1-120)..."

# The tmpfs mounts lived in host2's own mount namespace: nothing is left mounted here.
grep -q "trainer-private" /proc/mounts && fail "a private tmpfs is still mounted: $(grep trainer-private /proc/mounts)"
echo "PASS"
