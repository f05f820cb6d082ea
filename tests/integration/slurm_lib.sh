# shellcheck shell=bash disable=SC2154  # trainer, src, scratch come from the sourcing test
# Helpers sourced by the launcher tests (slurm_*.sh, netns_*.sh): skip and fail with CTest's codes,
# root and tool checks, cleanup actions that run on any exit, building the MPI hello program,
# and starting the local Slurm cluster (scripts/slurm_local_cluster.sh) for one test.
# The sourcing script sets: trainer, src, scratch ($1, $2, $3 of the test).

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
require_root() { [[ $(id -u) -eq 0 ]] || skip "needs root"; }
require_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || skip "$tool not found (scripts/install_slurm.sh installs Slurm, munge and iproute2)"
  done
}

# Cleanup actions run in reverse order on every exit, including failures and SIGINT/SIGTERM.
cleanup_actions=()
add_cleanup() { cleanup_actions=("$1" "${cleanup_actions[@]}"); }
run_cleanup() {
  local action
  for action in "${cleanup_actions[@]}"; do eval "$action" || true; done
  cleanup_actions=()
}
trap run_cleanup EXIT
trap 'exit 130' INT TERM

# Open MPI refuses root without these (CTest sets them too; manual runs need them).
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# fresh_scratch: an empty scratch folder, made the working directory.
fresh_scratch() {
  rm -rf "$scratch"
  mkdir -p "$scratch" || fail "cannot create $scratch"
  cd "$scratch" || fail "cannot enter $scratch"
}

# build_mpi_hello OUTPUT: compiles tests/integration/mpi_hello.c with mpicc.
build_mpi_hello() {
  mpicc -O1 -o "$1" "$src/tests/integration/mpi_hello.c" || fail "mpicc could not build mpi_hello.c"
}

# start_local_cluster STATE_DIR: starts the cluster, stops it on exit, exports SLURM_CONF.
# A port away from Slurm's default (6817) so that a system Slurm on this machine is left alone.
start_local_cluster() {
  local state=$1
  export SLURM_LOCAL_PORT=${SLURM_LOCAL_PORT:-16817}
  add_cleanup "bash '$src/scripts/slurm_local_cluster.sh' stop '$state' >/dev/null"
  bash "$src/scripts/slurm_local_cluster.sh" start "$state" || fail "the local Slurm cluster did not start (logs in $state/log)"
  export SLURM_CONF=$state/slurm.conf
}

# job_field JOBID FIELD: one field of `scontrol show job` (JobState, ExitCode, Restarts, ...).
job_field() {
  scontrol show job "$1" 2>/dev/null | grep -oE "(^|[[:space:]])$2=[^[:space:]]*" | head -n 1 | cut -d= -f2
}

# job_active JOBID: true while the job is pending, starting, running or finishing.
job_active() {
  case $(job_field "$1" JobState) in
    PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | RESIZING | SUSPENDED) return 0 ;;
    *) return 1 ;;
  esac
}
