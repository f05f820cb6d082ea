// ParallelGroups: the communicators of one rank in the DP x TP x PP grid, as the engine and the
// checkpoint code see them (no MPI types). *_host groups move host memory (scalars, checkpoint
// shards); the others move the backend's memory: the same MPI groups on the CPU path, NCCL
// communicators on the GPU path.
#pragma once

#include "common/communicator.h"
#include "common/topology.h"

namespace trainer {

struct ParallelGroups {
  Topology topology;
  Topology::Coord coord;
  int world_rank = 0;
  Communicator* world_host = nullptr;
  Communicator* tp = nullptr;
  Communicator* dp = nullptr;
  Communicator* pp = nullptr;
  Communicator* embedding = nullptr;  // null unless first/last stage with pp > 1
};

}  // namespace trainer
