// Topology: the rank grid, derived from one order string (fastest coordinate first, Megatron-Core
// style): "tp-sharding-ep-edp-pp" puts TP peers next to each other (one node), then the sharding
// ranks, then the data-parallel replicas, then the pipeline stages. The data-parallel width for
// batching is sharding x dp (PaddleFleetX: sharding ranks are data ranks); `Coord::dp` is a
// rank's index among them (sharding fastest). The replicas are ep x edp: expert parallelism is
// carved out of them as Megatron does (ep consecutive replicas hold one copy of the experts
// between them, each 1/ep of it; the edp replicas with the same EP index hold the same experts).
// Pure arithmetic, no MPI, so the model, checkpoint and engine layers can use it.
#pragma once

#include <string>
#include <vector>

namespace trainer {

struct Topology {
  // The order the grid is laid out in, fastest first; every group below is derived from it.
  static constexpr const char* kOrder = "tp-sharding-ep-edp-pp";
  int world_size = 1;
  // dp: the data-parallel width (replicas x sharding ranks); sharding: ranks sharing one copy of
  // the sharded state (1: none), dividing dp.
  int tp = 1, dp = 1, pp = 1, ep = 1, sharding = 1;

  struct Coord {
    int tp = 0, dp = 0, pp = 0;
    int shard = 0;    // index in the sharding group
    int replica = 0;  // index in the replica (pure data-parallel) group: ep + ep_size * edp
    int ep = 0;       // index in the expert-parallel group (the experts this rank holds)
    int edp = 0;      // index in the expert-data-parallel group (the replicas of those experts)
  };
  int replicas() const { return dp / sharding; }
  int expert_dp() const { return replicas() / ep; }
  // The sizes of the order's dimensions, fastest first.
  std::vector<int> Sizes() const { return {tp, sharding, ep, expert_dp(), pp}; }
  Coord CoordOf(int rank) const {
    const std::vector<int> sizes = Sizes();
    int digits[5];
    for (int i = 0; i < 5; ++i) {
      digits[i] = rank % sizes[i];
      rank /= sizes[i];
    }
    Coord c;
    c.tp = digits[0];
    c.shard = digits[1];
    c.ep = digits[2];
    c.edp = digits[3];
    c.pp = digits[4];
    c.replica = c.ep + ep * c.edp;
    c.dp = c.shard + sharding * c.replica;
    return c;
  }
  // dp_rank: the index among the data-parallel ranks (shard fastest).
  int RankOf(int tp_rank, int dp_rank, int pp_rank) const {
    const int shard = dp_rank % sharding, replica = dp_rank / sharding;
    return tp_rank + tp * (shard + sharding * (replica + replicas() * pp_rank));
  }
  // The group of `rank` that spans the order's dimensions in `mask` (bit i: the i-th of
  // tp, sharding, ep, edp, pp): its colour (equal for its members) and this rank's key in it.
  void Group(int rank, unsigned mask, int* color, int* key) const {
    const std::vector<int> sizes = Sizes();
    int c = 0, k = 0, c_scale = 1, k_scale = 1;
    for (int i = 0; i < 5; ++i) {
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
  // The world ranks of that group, by key.
  std::vector<int> Members(int rank, unsigned mask) const {
    int color = 0, key = 0;
    Group(rank, mask, &color, &key);
    std::vector<int> members;
    for (int r = 0; r < world_size; ++r) {
      int c = 0, k = 0;
      Group(r, mask, &c, &k);
      if (c == color) members.push_back(r);  // ascending rank is ascending key
    }
    return members;
  }
  // "dp 1/2 tp 0/2 pp 1/2", with "sharding 1/2" when the state is sharded and "ep 1/2 edp 0/1"
  // with expert parallelism.
  std::string Describe(int rank) const {
    Coord c = CoordOf(rank);
    std::string text = "dp " + std::to_string(c.dp) + "/" + std::to_string(dp);
    if (sharding > 1)
      text += " (sharding " + std::to_string(c.shard) + "/" + std::to_string(sharding) +
              ", replica " + std::to_string(c.replica) + "/" + std::to_string(replicas()) + ")";
    if (ep > 1)
      text += " (ep " + std::to_string(c.ep) + "/" + std::to_string(ep) + ", edp " +
              std::to_string(c.edp) + "/" + std::to_string(expert_dp()) + ")";
    return text + " tp " + std::to_string(c.tp) + "/" + std::to_string(tp) + " pp " +
           std::to_string(c.pp) + "/" + std::to_string(pp);
  }
};

// Masks for Topology::Group, one bit per dimension of the order string.
enum TopologyDim : unsigned {
  kDimTp = 1u << 0,
  kDimSharding = 1u << 1,
  kDimEp = 1u << 2,        // the expert-parallel group: ep consecutive replicas
  kDimExpertDp = 1u << 3,  // the expert-data-parallel group: the replicas of one EP index
  kDimPp = 1u << 4,
  kDimReplica = kDimEp | kDimExpertDp,
};

}  // namespace trainer
