// Topology: the rank grid, derived from one order string (fastest coordinate first, Megatron-Core
// style): "tp-sharding-dp-pp" puts TP peers next to each other (one node), then the sharding
// ranks, then the data-parallel replicas, then the pipeline stages. The data-parallel width for
// batching is sharding x dp (PaddleFleetX: sharding ranks are data ranks); `Coord::dp` is a
// rank's index among them (sharding fastest). EP is carved out of DP and reserved for MoE. Pure
// arithmetic, no MPI, so the model, checkpoint and engine layers can use it.
#pragma once

#include <string>
#include <vector>

namespace trainer {

struct Topology {
  // The order the grid is laid out in, fastest first; every group below is derived from it.
  static constexpr const char* kOrder = "tp-sharding-dp-pp";
  int world_size = 1;
  // dp: the data-parallel width (replicas x sharding ranks); sharding: ranks sharing one copy of
  // the sharded state (1: none), dividing dp.
  int tp = 1, dp = 1, pp = 1, ep = 1, sharding = 1;

  struct Coord {
    int tp = 0, dp = 0, pp = 0, ep = 0;
    int shard = 0;    // index in the sharding group
    int replica = 0;  // index in the replica (pure data-parallel) group
  };
  int replicas() const { return dp / sharding; }
  // The sizes of the order's dimensions, fastest first.
  std::vector<int> Sizes() const { return {tp, sharding, replicas(), pp}; }
  Coord CoordOf(int rank) const {
    const std::vector<int> sizes = Sizes();
    int digits[4];
    for (int i = 0; i < 4; ++i) {
      digits[i] = rank % sizes[i];
      rank /= sizes[i];
    }
    Coord c;
    c.tp = digits[0];
    c.shard = digits[1];
    c.replica = digits[2];
    c.pp = digits[3];
    c.dp = c.shard + sharding * c.replica;
    c.ep = c.dp % ep;
    return c;
  }
  // dp_rank: the index among the data-parallel ranks (shard fastest).
  int RankOf(int tp_rank, int dp_rank, int pp_rank) const {
    const int shard = dp_rank % sharding, replica = dp_rank / sharding;
    return tp_rank + tp * (shard + sharding * (replica + replicas() * pp_rank));
  }
  // The group of `rank` that spans the order's dimensions in `mask` (bit i: the i-th of
  // tp, sharding, dp, pp): its colour (equal for its members) and this rank's key in it.
  void Group(int rank, unsigned mask, int* color, int* key) const {
    const std::vector<int> sizes = Sizes();
    int c = 0, k = 0, c_scale = 1, k_scale = 1;
    for (int i = 0; i < 4; ++i) {
      const int digit = rank % sizes[i];
      rank /= sizes[i];
      if (mask & (1u << i)) {
        k += digit * k_scale;
        k_scale *= sizes[i];
      } else {
        c += digit * c_scale;
        c_scale *= sizes[i];
      }
    }
    *color = c;
    *key = k;
  }
  // "dp 1/2 tp 0/2 pp 1/2", with "sharding 1/2" when the state is sharded.
  std::string Describe(int rank) const {
    Coord c = CoordOf(rank);
    std::string text = "dp " + std::to_string(c.dp) + "/" + std::to_string(dp);
    if (sharding > 1)
      text += " (sharding " + std::to_string(c.shard) + "/" + std::to_string(sharding) +
              ", replica " + std::to_string(c.replica) + "/" + std::to_string(replicas()) + ")";
    return text + " tp " + std::to_string(c.tp) + "/" + std::to_string(tp) + " pp " +
           std::to_string(c.pp) + "/" + std::to_string(pp);
  }
};

// Masks for Topology::Group, one bit per dimension of the order string.
enum TopologyDim : unsigned {
  kDimTp = 1u << 0,
  kDimSharding = 1u << 1,
  kDimReplica = 1u << 2,
  kDimPp = 1u << 3,
};

}  // namespace trainer
