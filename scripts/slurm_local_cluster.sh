#!/usr/bin/env bash
# A real one-machine Slurm cluster for tests and demos: writes a slurm.conf for this host into a
# state folder, starts its own munged (own socket), slurmctld and slurmd as root, waits until the
# node is idle, and stops them again by their PID files. Installs nothing (scripts/install_deps.sh --tests
# does). All daemon traffic stays on 127.0.0.1.
#
#   scripts/slurm_local_cluster.sh start  STATE_DIR   # then: export SLURM_CONF=STATE_DIR/slurm.conf
#   scripts/slurm_local_cluster.sh status STATE_DIR   # exit 0 when all three daemons run
#   scripts/slurm_local_cluster.sh stop   STATE_DIR   # cancels jobs, stops daemons, keeps logs
#
# Environment: SLURM_LOCAL_PORT (slurmctld port, default 6817; slurmd uses the next one),
# SLURM_LOCAL_TASKS_PER_CORE (OverSubscribe factor, default 4).
set -euo pipefail

usage() {
  echo "usage: $0 start|stop|status STATE_DIR" >&2
  exit 2
}
die() {
  echo "error: $*" >&2
  exit 1
}

[[ $# -eq 2 ]] || usage
action=$1
state=$(mkdir -p "$2" && cd "$2" && pwd)
conf=$state/slurm.conf
port=${SLURM_LOCAL_PORT:-6817}
tasks_per_core=${SLURM_LOCAL_TASKS_PER_CORE:-4}

# Unix socket paths are limited to 108 bytes: when the state folder is deep, munge's socket and
# slurmd's spool (step sockets) go to a short folder under /tmp named after the state folder.
runtime_dir() {
  if [[ ${#state} -le 48 ]]; then
    echo "$state/run"
  else
    echo "/tmp/trainer-slurm-$(printf '%s' "$state" | cksum | cut -d' ' -f1)"
  fi
}
run=$(runtime_dir)

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_conf() {
  local host node_line
  host=$(hostname -s)
  # slurmd -C prints this machine's NodeName line (CPUs, sockets, cores, RealMemory).
  node_line=$(slurmd -C | head -n 1)
  [[ $node_line == NodeName=* ]] || die "probing the node (slurmd -C): unexpected output '$node_line'. Check that slurmd runs on this machine."
  cat >"$conf" <<CONF
# Written by scripts/slurm_local_cluster.sh for a one-node test cluster on $host.
ClusterName=trainer-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$run/munge.socket
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$run/spool
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobRequeue=1
# Seconds between SIGTERM and SIGKILL when a job ends or is cancelled (time to save).
KillWait=30
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:$tasks_per_core
CONF
}

wait_for_idle() {
  local host state_now
  host=$(hostname -s)
  for _ in $(seq 1 60); do
    state_now=$(SLURM_CONF=$conf sinfo -h -n "$host" -o %t 2>/dev/null || true)
    if [[ $state_now == idle* || $state_now == mix* || $state_now == alloc* ]]; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

start() {
  [[ $(id -u) -eq 0 ]] || die "starting the local Slurm cluster ($state): not root. Run it as root."
  local tool
  for tool in munged slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null || die "starting the local Slurm cluster: $tool not found. Run scripts/install_deps.sh --tests."
  done
  if pid_alive "$state/slurmctld.pid" || pid_alive "$state/slurmd.pid"; then
    die "starting the local Slurm cluster ($state): daemons from this state folder already run. Run '$0 stop $state' first."
  fi
  if command -v ss >/dev/null && ss -ltn | awk '{print $4}' | grep -Eq ":($port|$((port + 1)))\$"; then
    die "starting the local Slurm cluster ($state): port $port or $((port + 1)) is in use. Set SLURM_LOCAL_PORT to a free port."
  fi
  mkdir -p "$state/ctld" "$state/log" "$run/spool"
  echo "$run" >"$state/runtime_dir"
  write_conf

  # munged refuses to run as root without --force; its warning about log ownership is harmless.
  munged --force --socket="$run/munge.socket" --pid-file="$state/munged.pid" \
    --log-file="$state/log/munged.log" --seed-file="$state/munged.seed" 2>>"$state/log/munged.err" ||
    die "starting munged ($state/log/munged.log): it failed. Read that log; the key must exist (/etc/munge/munge.key)."
  SLURM_CONF=$conf slurmctld -f "$conf" ||
    die "starting slurmctld ($state/log/slurmctld.log): it failed. Read that log."
  SLURM_CONF=$conf slurmd -f "$conf" ||
    die "starting slurmd ($state/log/slurmd.log): it failed. Read that log."
  if ! wait_for_idle; then
    tail -n 20 "$state/log/slurmctld.log" "$state/log/slurmd.log" >&2 || true
    die "starting the local Slurm cluster ($conf): the node did not become idle within 30 s. Read the logs above, then run '$0 stop $state'."
  fi
  echo "local Slurm cluster up: export SLURM_CONF=$conf"
}

# Sends TERM to the daemons of the given PID files, then KILL to those still there after 10 s;
# removes the PID files.
stop_daemons() {
  local pid_file pids=() pid
  for pid_file in "$@"; do
    if pid_alive "$pid_file"; then pids+=("$(cat "$pid_file")"); fi
  done
  if [[ ${#pids[@]} -gt 0 ]]; then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 40); do
      kill -0 "${pids[@]}" 2>/dev/null || break
      sleep 0.25
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  fi
  rm -f "$@"
}

# Processes of this cluster that outlive its daemons: slurmstepd and the jobs' tasks, known by
# SLURM_CONF=<this conf> in their environment (tasks also carry SLURM_JOB_ID).
leftover_pids() {
  local dir pid environment
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    [[ $pid == "$$" || $pid == "$PPID" ]] && continue
    environment=$({ tr '\0' '\n' <"$dir/environ"; } 2>/dev/null) || continue
    grep -qx "SLURM_CONF=$conf" <<<"$environment" || continue
    if [[ $(cat "$dir/comm" 2>/dev/null) == slurmstepd ]] || grep -q '^SLURM_JOB_ID=' <<<"$environment"; then
      echo "$pid"
    fi
  done
}

stop() {
  local leftovers
  if pid_alive "$state/slurmctld.pid"; then
    # Cancel every job of this cluster so that no step is left running, and give them a moment.
    local jobs
    jobs=$(SLURM_CONF=$conf squeue -h -o %i 2>/dev/null || true)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$conf scancel $jobs 2>/dev/null || true
      for _ in $(seq 1 30); do
        [[ -z $(SLURM_CONF=$conf squeue -h -o %i 2>/dev/null) && -z $(leftover_pids) ]] && break
        sleep 0.5
      done
    fi
  fi
  stop_daemons "$state/slurmd.pid" "$state/slurmctld.pid"
  leftovers=$(leftover_pids)
  if [[ -n $leftovers ]]; then
    echo "warning: killing processes left by the cluster's jobs: ${leftovers//$'\n'/ }" >&2
    # shellcheck disable=SC2086
    kill -KILL $leftovers 2>/dev/null || true
  fi
  stop_daemons "$state/munged.pid"
  if [[ -s $state/runtime_dir && $(cat "$state/runtime_dir") == /tmp/trainer-slurm-* ]]; then
    rm -rf "$(cat "$state/runtime_dir")"
  fi
  echo "local Slurm cluster stopped ($state)"
}

status() {
  local name rc=0
  for name in munged slurmctld slurmd; do
    if pid_alive "$state/$name.pid"; then
      echo "$name: running (pid $(cat "$state/$name.pid"))"
    else
      echo "$name: stopped"
      rc=3
    fi
  done
  if [[ $rc -eq 0 ]]; then SLURM_CONF=$conf sinfo || rc=3; fi
  return $rc
}

case $action in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
