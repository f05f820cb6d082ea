#!/usr/bin/env bash
# Launches a command (normally `trainer train ...`) over the machines of an Open MPI hostfile,
# without Slurm: picks the rank count from the hostfile's slots, maps ranks per host, forwards
# the environment variables that matter (NCCL_*, TRAINER_*, CUDA_*, UCX_*, OMP_*, PATH,
# LD_LIBRARY_PATH; OMPI_MCA_* travel by themselves), pins Open MPI's control and TCP traffic to
# one network when asked, and returns the command's exit code (75: preempted, resume later).
# Ctrl-C (SIGINT), SIGTERM, SIGUSR1 or SIGHUP make the ranks save a checkpoint and exit 75; a second
# Ctrl-C ends them at once (see Signals below).
#
#   slurm/mpirun_hostfile.sh -H hosts.txt -N 8 -- trainer train --config configs/gpt2-124m.yaml
#
# Options: -H|--hostfile FILE (or TRAINER_HOSTFILE), -n|--np N (default: the hostfile's slots
# summed), -N|--per-host K (ranks per host; default: fill each host's slots in order).
# Environment: TRAINER_NET (CIDR or interface name, e.g. 10.0.0.0/24 or ib0: Open MPI's OOB and
# TCP BTL use only it), TRAINER_RSH_AGENT (what starts remote daemons instead of ssh, e.g.
# "scripts/netns_hosts.sh rsh" for the test hosts), TRAINER_BIND (--bind-to value, default none),
# TRAINER_MPIRUN_ARGS (more mpirun arguments, split on spaces), MPIRUN (default mpirun).
set -euo pipefail

usage() {
  sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "error: $*" >&2
  exit 2
}

hostfile=${TRAINER_HOSTFILE:-}
np=""
per_host=""
while [[ $# -gt 0 ]]; do
  case $1 in
    -H | --hostfile) hostfile=${2:?}; shift 2 ;;
    -n | --np) np=${2:?}; shift 2 ;;
    -N | --per-host) per_host=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) die "unknown option $1 (slurm/mpirun_hostfile.sh). Run it with --help." ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || die "no command to launch (slurm/mpirun_hostfile.sh). Put it after --."
[[ -n $hostfile ]] || die "no hostfile (slurm/mpirun_hostfile.sh). Pass -H FILE or set TRAINER_HOSTFILE."
[[ -r $hostfile ]] || die "hostfile $hostfile (slurm/mpirun_hostfile.sh): not readable. Check the path."

# Hosts and their slots, skipping comments and blank lines ("host slots=N", slots default 1).
hosts=0
slots=0
while read -r host rest || [[ -n $host ]]; do  # a last line without a newline counts too
  [[ -z $host || $host == \#* ]] && continue
  hosts=$((hosts + 1))
  if [[ $rest =~ slots=([0-9]+) ]]; then
    slots=$((slots + BASH_REMATCH[1]))
  else
    slots=$((slots + 1))
  fi
done <"$hostfile"
[[ $hosts -gt 0 ]] || die "hostfile $hostfile (slurm/mpirun_hostfile.sh): names no host. Add lines 'HOST slots=N'."
if [[ -z $np ]]; then
  if [[ -n $per_host ]]; then np=$((hosts * per_host)); else np=$slots; fi
fi

args=(--hostfile "$hostfile" -n "$np" --bind-to "${TRAINER_BIND:-none}")
if [[ -n $per_host ]]; then args+=(--map-by "ppr:$per_host:node"); fi
if [[ -n ${TRAINER_NET:-} ]]; then
  args+=(--mca oob_tcp_if_include "$TRAINER_NET" --mca btl_tcp_if_include "$TRAINER_NET")
fi
if [[ -n ${TRAINER_RSH_AGENT:-} ]]; then
  args+=(--mca plm_rsh_agent "$TRAINER_RSH_AGENT" --mca plm_rsh_no_tree_spawn 1)
fi
for name in $(compgen -e); do
  case $name in
    NCCL_* | TRAINER_* | CUDA_* | UCX_* | OMP_* | PATH | LD_LIBRARY_PATH) args+=(-x "$name") ;;
  esac
done
# shellcheck disable=SC2206  # TRAINER_MPIRUN_ARGS is split on spaces on purpose
if [[ -n ${TRAINER_MPIRUN_ARGS:-} ]]; then args+=($TRAINER_MPIRUN_ARGS); fi

# Signals: the ranks save and exit 75 on SIGUSR1, which mpirun forwards to every rank; but mpirun
# kills the ranks on SIGINT or SIGTERM, before a save can finish. So mpirun runs in a process
# group of its own (set -m), out of reach of the terminal's Ctrl-C, and this script passes the
# first SIGINT, SIGTERM or SIGUSR1 it gets on as SIGUSR1: the ranks stop after their step with a
# checkpoint, and this script exits 75. A second SIGINT or SIGTERM passes SIGTERM to mpirun,
# which ends the ranks at once, without a checkpoint. A hangup (SIGHUP) is taken as SIGTERM is.
# SIGKILL cannot be passed on: mpirun and the ranks would go on without this script.
set -m
"${MPIRUN:-mpirun}" "${args[@]}" "$@" </dev/null &
launcher_pid=$!
set +m
signalled=0
# shellcheck disable=SC2317  # called by the traps below
forward_signal() {
  if [[ $signalled -eq 0 || $1 == USR1 ]]; then
    echo "slurm/mpirun_hostfile.sh: got SIG$1: passing SIGUSR1 to the ranks (they save and exit 75; SIGINT again to quit at once)" >&2
    kill -USR1 "$launcher_pid" 2>/dev/null || true
  else
    echo "slurm/mpirun_hostfile.sh: got SIG$1 again: ending the ranks without a checkpoint" >&2
    kill -TERM "$launcher_pid" 2>/dev/null || true
  fi
  signalled=1
}
trap 'forward_signal INT' INT
trap 'forward_signal TERM' TERM
trap 'forward_signal USR1' USR1
trap 'forward_signal HUP' HUP  # the terminal or ssh session closed
# `wait` returns early (status > 128) when a trap runs: wait again until mpirun is gone, then
# once more for its exit code (bash keeps the status of a child it has reaped).
while kill -0 "$launcher_pid" 2>/dev/null; do
  wait "$launcher_pid" || true
done
status=0
wait "$launcher_pid" || status=$?
exit "$status"
