// ParallelGroups: the communicators of one rank in the DP (replica x sharding) x TP x PP grid
// (the replicas split into EP x expert-DP), as
// the engine and the checkpoint code see them (no MPI types). *_host groups move host memory
// (scalars, checkpoint shards); the others move the backend's memory: the same MPI groups on the
// CPU path, NCCL communicators on the GPU path.
#pragma once

#include "common/communicator.h"
#include "common/device_groups.h"
#include "common/topology.h"

namespace trainer {

struct ParallelGroups {
  Topology topology;
  Topology::Coord coord;
  int world_rank = 0;
  int ranks_on_host = 1;  // the world's ranks on this rank's host (their share of its memory)
  int gpus = 0;  // the distinct GPUs of the job (fewer than its ranks where they share); 0: CPU
  Communicator* world_host = nullptr;
  Communicator* tp = nullptr;
  Communicator* dp = nullptr;
  Communicator* pp = nullptr;
  Communicator* embedding = nullptr;  // null unless first/last stage with pp > 1
  // Distributed.sharding: the ranks that share one copy of the sharded state (a subgroup of dp),
  // and the replica group that all-reduces each shard's gradients across sharding groups.
  Communicator* sharding = nullptr;
  Communicator* replica = nullptr;
  // Expert parallelism (Distributed.ep_degree): the ranks that hold one copy of the experts
  // between them (MoE dispatch and combine), and the ranks holding the same experts (their
  // gradients' sum). Groups of one without EP.
  Communicator* ep = nullptr;
  Communicator* expert_dp = nullptr;
  // The slot of a device group.
  Communicator*& Of(DeviceGroup g) {
    switch (g) {
      case DeviceGroup::kTp:
        return tp;
      case DeviceGroup::kDp:
        return dp;
      case DeviceGroup::kPp:
        return pp;
      case DeviceGroup::kSharding:
        return sharding;
      case DeviceGroup::kReplica:
        return replica;
      case DeviceGroup::kEp:
        return ep;
      case DeviceGroup::kExpertDp:
        return expert_dp;
      case DeviceGroup::kEmbedding:
        break;
    }
    return embedding;
  }
};

}  // namespace trainer
