#!/usr/bin/env bash
# `mpirun --hostfile` across two "hosts" made of network namespaces (scripts/netns_hosts.sh): one
# rank per host, started by slurm/mpirun_hostfile.sh with the namespaces' launcher agent in place
# of ssh. Checks that each rank ran on its own host (host name and address), that the ranks'
# all-reduce agreed, that the traffic went over the hosts' own interfaces, and that the root
# namespace never got an address of the test subnet. Deletes every namespace it made, even on
# failure. Skips (77) without root or `ip netns`, after checking the rank count the script takes
# from a hostfile (which needs neither).
# Arguments: $1 trainer binary (unused), $2 source dir, $3 scratch dir.
set -uo pipefail
# shellcheck disable=SC2034  # the trainer is not needed here
trainer=$1 src=$2 scratch=$3
# shellcheck source=tests/integration/slurm_lib.sh
source "$src/tests/integration/slurm_lib.sh"

fresh_scratch
# First, without root: the rank count the script derives from a hostfile, read from the mpirun
# command line it builds (MPIRUN prints its arguments). Slots are summed over every line, the last
# one without a newline too; comments and blank lines count for nothing.
printf '#!/bin/sh\necho "$@"\n' >print_args && chmod +x print_args
rank_count() {
  MPIRUN=$scratch/print_args bash "$src/slurm/mpirun_hostfile.sh" -H "$1" -- true |
    sed -nE 's/.* -n ([0-9]+) .*/\1/p'
}
printf 'node1 slots=8\nnode2 slots=8' >no_newline
printf '# two nodes\nnode1 slots=4\n\nnode2\n' >newline
[[ $(rank_count no_newline) == 16 ]] || fail "hostfile without a last newline: -n $(rank_count no_newline), expected 16"
[[ $(rank_count newline) == 5 ]] || fail "hostfile with a comment and a blank line: -n $(rank_count newline), expected 5"
echo "ok: ranks from the hostfile's slots, the last line without a newline included"

require_root
require_tools mpicc
hello=$scratch/mpi_hello
build_mpi_hello "$hello"

start_netns_hosts
[[ $(cat "$scratch/hostfile") == "$host1 slots=1"$'\n'"$host2 slots=1" ]] ||
  fail "the hostfile does not name both hosts: $(cat "$scratch/hostfile")"

# Bytes through host2's interface, read inside host2 (ip netns exec mounts its own /sys).
interface_bytes() {
  local rx tx
  read -r rx tx < <(ip netns exec "$host2" cat /sys/class/net/eth0/statistics/rx_bytes \
    /sys/class/net/eth0/statistics/tx_bytes | paste -sd' ')
  echo $((rx + tx))
}
bytes_before=$(interface_bytes)

# mpirun runs on host1; the agent starts host2's daemon inside host2's namespace.
on_netns_hosts "$hello" >"$scratch/mpirun.out" 2>&1 ||
  fail "mpirun --hostfile across the namespaces failed: $(tail -n 20 "$scratch/mpirun.out")"
cat "$scratch/mpirun.out"

grep -q "^hello rank 0 of 2 on $host1 pid [0-9]* addresses $TRAINER_NETNS_SUBNET.11 rank_sum 1$" "$scratch/mpirun.out" ||
  fail "rank 0 did not run on $host1 ($TRAINER_NETNS_SUBNET.11)"
grep -q "^hello rank 1 of 2 on $host2 pid [0-9]* addresses $TRAINER_NETNS_SUBNET.12 rank_sum 1$" "$scratch/mpirun.out" ||
  fail "rank 1 did not run on $host2 ($TRAINER_NETNS_SUBNET.12)"
echo "ok: one rank on each host, all-reduce agreed"

bytes_after=$(interface_bytes)
[[ $((bytes_after - bytes_before)) -gt 1000 ]] ||
  fail "only $((bytes_after - bytes_before)) bytes crossed $host2's interface: the ranks did not talk over it"
echo "ok: $((bytes_after - bytes_before)) bytes crossed $host2's interface"

ip -4 -o addr show | grep -q " $TRAINER_NETNS_SUBNET\." &&
  fail "the root namespace has an address in $TRAINER_NETNS_SUBNET.0/24"
ip -4 route show | grep -q "^$TRAINER_NETNS_SUBNET\." &&
  fail "the root namespace has a route to $TRAINER_NETNS_SUBNET.0/24"
echo "ok: the test subnet exists only inside the namespaces"

bash "$netns" destroy >/dev/null || fail "scripts/netns_hosts.sh destroy failed"
ip netns list | grep -q "^$TRAINER_NETNS_PREFIX" && fail "namespaces left after destroy: $(ip netns list)"
ls -d /etc/netns/"$TRAINER_NETNS_PREFIX"* >/dev/null 2>&1 && fail "/etc/netns/$TRAINER_NETNS_PREFIX* left after destroy"
echo "ok: namespaces deleted"
echo "PASS"
