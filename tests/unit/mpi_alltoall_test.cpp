// MpiCommunicator's all-to-all (uneven and zero counts, the counts exchange) under mpiexec,
// checked against values each rank can write down from the ranks' numbers alone; and the EP and
// expert-DP groups of Topology against their closed form.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "alltoall_cases.h"
#include "common/topology.h"
#include "mpi_bootstrap/mpi_runtime.h"
#include "mpi_test_main.h"

namespace trainer {
namespace {

MpiRuntime* g_runtime = nullptr;

TEST(MpiAllToAll, UnevenCountsArriveInOrder) {
  ExpectUnevenAllToAll(g_runtime->world());
}

TEST(MpiAllToAll, CountsExchangeOfSeveralPerPeer) {
  ExpectCountsExchangeOfSeveralPerPeer(g_runtime->world());
}

// tp 2 x dp 4 (ep 2 x edp 2) x pp 2: the EP group of a rank is the 2 consecutive DP ranks of its
// (tp, pp) that share dp / 2; its expert-DP group the DP ranks with its dp % 2.
TEST(Topology, ExpertGroupsAreCarvedOutOfDataParallelRanks) {
  Topology t;
  t.world_size = 16;
  t.tp = 2;
  t.dp = 4;
  t.pp = 2;
  t.ep = 2;
  for (int r = 0; r < 16; ++r) {
    const int tp = r % 2, dp = (r / 2) % 4, pp = r / 8;
    const Topology::Coord c = t.CoordOf(r);
    EXPECT_EQ(c.tp, tp);
    EXPECT_EQ(c.dp, dp);
    EXPECT_EQ(c.pp, pp);
    EXPECT_EQ(c.ep, dp % 2);
    EXPECT_EQ(c.edp, dp / 2);
    EXPECT_EQ(t.RankOf(tp, dp, pp), r);
    // Members of each group: same colour; the key is the index in the group.
    std::set<int> ep_members, edp_members;
    int color = 0, key = 0;
    t.Group(r, kDimEp, &color, &key);
    EXPECT_EQ(key, dp % 2);
    for (int q = 0; q < 16; ++q) {
      int qc = 0, qk = 0;
      t.Group(q, kDimEp, &qc, &qk);
      if (qc == color) ep_members.insert(q);
    }
    EXPECT_EQ(ep_members,
              (std::set<int>{t.RankOf(tp, dp / 2 * 2, pp), t.RankOf(tp, dp / 2 * 2 + 1, pp)}));
    t.Group(r, kDimExpertDp, &color, &key);
    EXPECT_EQ(key, dp / 2);
    for (int q = 0; q < 16; ++q) {
      int qc = 0, qk = 0;
      t.Group(q, kDimExpertDp, &qc, &qk);
      if (qc == color) edp_members.insert(q);
    }
    EXPECT_EQ(edp_members, (std::set<int>{t.RankOf(tp, dp % 2, pp), t.RankOf(tp, dp % 2 + 2, pp)}));
  }
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  return trainer::RunMpiTests(argc, argv, &trainer::g_runtime);
}
