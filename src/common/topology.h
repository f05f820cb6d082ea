// Topology: the DP x TP x PP (x EP) rank grid in Megatron order (TP fastest, so TP peers share a
// node; then DP; then PP). EP is carved out of DP and reserved for MoE. Pure arithmetic, no MPI,
// so the model, checkpoint and engine layers can use it.
#pragma once

#include <string>
#include <vector>

namespace trainer {

struct Topology {
  int world_size = 1;
  int tp = 1, dp = 1, pp = 1, ep = 1;

  struct Coord {
    int tp = 0, dp = 0, pp = 0, ep = 0;
  };
  Coord CoordOf(int rank) const {
    Coord c;
    c.tp = rank % tp;
    c.dp = (rank / tp) % dp;
    c.pp = rank / (tp * dp);
    c.ep = c.dp % ep;
    return c;
  }
  int RankOf(int tp_rank, int dp_rank, int pp_rank) const {
    return tp_rank + tp * (dp_rank + dp * pp_rank);
  }
  // "dp 1/2 tp 0/2 pp 1/2"
  std::string Describe(int rank) const {
    Coord c = CoordOf(rank);
    return "dp " + std::to_string(c.dp) + "/" + std::to_string(dp) + " tp " + std::to_string(c.tp) +
           "/" + std::to_string(tp) + " pp " + std::to_string(c.pp) + "/" + std::to_string(pp);
  }
};

}  // namespace trainer
