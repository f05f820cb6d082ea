#!/usr/bin/env bash
# checkpoint_kill.sh on a sharded layout: rank 0 killed with SIGKILL during the saves of a run
# sharded at stage 3 over its 2 ranks (each save gathers the shards of the weights and the Adam
# state first); the same guarantees hold: a verified `latest`, an exact resume, bit-identical
# losses and a bit-identical last checkpoint.
set -euo pipefail
CHECKPOINT_KILL_LAYOUT="-o Distributed.sharding.sharding_degree=2 -o Distributed.sharding.sharding_stage=3" \
  TRAINER_TEST_KILLS=${TRAINER_TEST_KILLS:-6} bash "$(dirname "$0")/checkpoint_kill.sh" "$@"
