#!/usr/bin/env bash
# Launches a command (normally `trainer train ...`) over the machines of an Open MPI hostfile,
# without Slurm: picks the rank count from the hostfile's slots, maps ranks per host, forwards
# the environment variables that matter (NCCL_*, TRAINER_*, CUDA_*, UCX_*, OMP_*, PATH,
# LD_LIBRARY_PATH; OMPI_MCA_* travel by themselves), pins Open MPI's control and TCP traffic to
# one network when asked, and returns the command's exit code (75: preempted, resume later).
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
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
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
while read -r host rest; do
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

# exec: signals sent to this script (USR1, TERM) reach mpirun, which forwards USR1 to every rank.
exec "${MPIRUN:-mpirun}" "${args[@]}" "$@"
