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
    command -v "$tool" >/dev/null || skip "$tool not found (scripts/install_deps.sh --tests installs Slurm, munge and iproute2)"
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

# start_netns_hosts: two network-namespace hosts of this test's own (scripts/netns_hosts.sh),
# deleted on exit. Sets netns (the script), host1, host2 and $scratch/hostfile (one slot each),
# and exports what slurm/mpirun_hostfile.sh needs to reach them (TRAINER_NET, TRAINER_RSH_AGENT).
# Skips without `ip netns`.
start_netns_hosts() {
  require_tools ip unshare mpirun
  # A prefix of our own so that parallel runs do not meet; the subnet exists only inside them.
  export TRAINER_NETNS_PREFIX=trt$$n TRAINER_NETNS_COUNT=2 TRAINER_NETNS_SUBNET=10.213.57
  netns=$src/scripts/netns_hosts.sh
  # shellcheck disable=SC2034  # host2 is for the sourcing test
  host1=${TRAINER_NETNS_PREFIX}1 host2=${TRAINER_NETNS_PREFIX}2
  local probe=${TRAINER_NETNS_PREFIX}-probe
  ip netns add "$probe" 2>/dev/null || skip "ip netns add does not work here (no CAP_NET_ADMIN?)"
  ip netns del "$probe"
  add_cleanup "bash '$netns' destroy >/dev/null"
  bash "$netns" create >/dev/null || fail "scripts/netns_hosts.sh create failed"
  bash "$netns" hostfile 1 >"$scratch/hostfile"
  export TRAINER_NET=$TRAINER_NETNS_SUBNET.0/24 TRAINER_RSH_AGENT="$netns rsh"
}

# on_netns_hosts CMD...: CMD as one rank on each namespace host, through slurm/mpirun_hostfile.sh
# started on host1 (60 s at most). Returns the command's exit code.
on_netns_hosts() {
  timeout --kill-after=5 60 bash "$netns" exec "$host1" bash "$src/slurm/mpirun_hostfile.sh" \
    -H "$scratch/hostfile" -N 1 -- "$@"
}

# make_text_dataset OUT: three generated text documents (~200 KB) packed with the byte tokenizer.
make_text_dataset() {
  local out=$1 dir doc line
  dir=$(dirname "$out")
  for doc in 1 2 3; do
    for line in $(seq 1 1500); do
      echo "document $doc line $line: the quick brown fox jumps over the lazy dog $((line * doc % 97))"
    done >"$dir/doc$doc.txt"
  done
  "$trainer" pack --input "$dir"/doc1.txt "$dir"/doc2.txt "$dir"/doc3.txt --output "$out" \
    >"$dir/pack.out" 2>&1 || fail "trainer pack failed: $(tail -n 5 "$dir/pack.out")"
}

# step_losses METRICS: "step loss" for each training record of a metrics.jsonl.
step_losses() {
  sed -nE 's/^\{"step": *([0-9]+), *"loss": *([^,}]+).*/\1 \2/p' "$1"
}

# compare_step_losses RUN REFERENCE TOL [FROM_STEP]: every loss that RUN's metrics.jsonl logged
# (at steps >= FROM_STEP) equals REFERENCE's loss at the same step within relative TOL. Prints
# the count and the worst difference; fails when a step is missing from REFERENCE or none match.
compare_step_losses() {
  awk -v tol="$3" -v from="${4:-0}" '
    FNR == NR { reference[$1] = $2; next }
    $1 < from { next }
    !($1 in reference) { printf "step %d is not in the reference run\n", $1; bad = 1; next }
    { n++; d = $2 - reference[$1]; d = d < 0 ? -d : d; r = reference[$1];
      r = d / (r < 0 ? -r : r); if (r >= worst) { worst = r; at = $1 }; last = $1 }
    END { if (n == 0) { print "no losses to compare"; exit 1 }
          printf "%d steps (%d-%d), worst relative difference %.3e at step %d (tolerance %s)\n",
                 n, (from > 1 ? from : 1), last, worst, at, tol;
          exit (bad || worst > tol) ? 1 : 0 }' <(step_losses "$2") <(step_losses "$1")
}

# expect_same_run RUN REFERENCE STEPS WHAT: the run in folder RUN logged STEPS losses equal to
# REFERENCE's (relative 1e-5) and wrote a final checkpoint equal to REFERENCE's.
expect_same_run() {
  local run=$1 reference=$2 steps=$3 what=$4
  local logged
  logged=$(step_losses "$run/metrics.jsonl" | wc -l)
  [[ $logged -eq $steps ]] || fail "$what logged $logged steps, expected $steps"
  compare_step_losses "$run/metrics.jsonl" "$reference/metrics.jsonl" 1e-5 ||
    fail "the losses of $what differ from $reference"
  local a b
  a=$(find "$run/checkpoints" -path "*step-*$steps/checkpoint.h5" | head -n 1)
  b=$(find "$reference/checkpoints" -path "*step-*$steps/checkpoint.h5" | head -n 1)
  [[ -n $a && -n $b ]] || fail "no step-$steps checkpoint in $run or $reference"
  "${COMPARE_CHECKPOINTS:-compare_checkpoints}" "$a" "$b" 1e-5 1e-3 ||
    fail "the checkpoint written by $what differs from $reference's"
}

# set_tiny_train_args DATA STEPS: the `trainer train` arguments of the launch tests, in `args`.
set_tiny_train_args() {
  args=(train -c "$src/configs/tiny-cpu.yaml" -o Data.train_path="$1"
        -o Model.hidden_size=64 -o Model.num_layers=2 -o Model.max_seq_len=64
        -o Global.global_batch_size=8 -o Global.micro_batch_size=4 -o Engine.max_steps="$2"
        -o Engine.eval_freq=0 -o Engine.logging_freq=1 -o Engine.save_steps="$2")
}

# run_reference DIR: the same training under plain `mpiexec -n 2` on this host, into DIR.
run_reference() {
  timeout --kill-after=5 60 "${MPIEXEC:-mpiexec}" --oversubscribe --bind-to none -n 2 "$trainer" \
    "${args[@]}" -o Engine.output_dir="$1" >"$1.out" 2>&1 ||
    fail "the 2-rank mpiexec run failed: $(tail -n 20 "$1.out")"
}
