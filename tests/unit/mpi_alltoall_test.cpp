// MpiCommunicator's all-to-all (uneven and zero counts, the counts exchange) under mpiexec,
// checked against values each rank can write down from the ranks' numbers alone; and the EP and
// expert-DP groups of Topology against their closed form.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "common/topology.h"
#include "mpi_bootstrap/mpi_runtime.h"

namespace trainer {
namespace {

MpiRuntime* g_runtime = nullptr;

// Rank s sends (s + p) % 3 elements to rank p (some zero): element i is s * 1000 + p * 100 + i.
int64_t Count(int s, int p) { return (s + p) % 3; }

TEST(MpiAllToAll, UnevenCountsArriveInOrder) {
  MpiCommunicator* world = g_runtime->world();
  const int n = world->size(), me = world->rank();
  std::vector<int64_t> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  std::vector<float> send;
  for (int p = 0; p < n; ++p) {
    send_counts[p] = Count(me, p);
    send_displs[p] = static_cast<int64_t>(send.size()) + 1;  // a gap: displacements are used
    send.push_back(-1.f);
    for (int64_t i = 0; i < send_counts[p]; ++i) send.push_back(me * 1000.f + p * 100.f + i);
  }
  // The counts exchange gives each rank what it will receive.
  ASSERT_TRUE(world->AllToAllCounts(send_counts.data(), recv_counts.data(), 1).ok());
  int64_t total = 0;
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ(recv_counts[s], Count(s, me));
    recv_displs[s] = total;
    total += recv_counts[s];
  }
  std::vector<float> recv(total + 1, -7.f);
  ASSERT_TRUE(world
                  ->AllToAllV(send.data(), send_counts.data(), send_displs.data(), recv.data(),
                              recv_counts.data(), recv_displs.data(), DType::kF32)
                  .ok());
  for (int s = 0; s < n; ++s)
    for (int64_t i = 0; i < Count(s, me); ++i)
      EXPECT_EQ(recv[recv_displs[s] + i], s * 1000.f + me * 100.f + i) << "from " << s;
  EXPECT_EQ(recv[total], -7.f);  // nothing past the received rows
}

TEST(MpiAllToAll, CountsExchangeOfSeveralPerPeer) {
  MpiCommunicator* world = g_runtime->world();
  const int n = world->size(), me = world->rank();
  const int per = 3;
  std::vector<int64_t> send(n * per), recv(n * per, -1);
  for (int p = 0; p < n; ++p)
    for (int j = 0; j < per; ++j) send[p * per + j] = (int64_t{me} << 40) + p * 10 + j;
  ASSERT_TRUE(world->AllToAllCounts(send.data(), recv.data(), per).ok());
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < per; ++j) EXPECT_EQ(recv[s * per + j], (int64_t{s} << 40) + me * 10 + j);
}

TEST(MpiAllToAll, SelfCommunicatorCopies) {
  SelfCommunicator self;
  const float send[4] = {9, 1, 2, 3};
  float recv[3] = {0, 0, 0};
  const int64_t sc = 3, sd = 1, rc = 3, rd = 0;
  ASSERT_TRUE(self.AllToAllV(send, &sc, &sd, recv, &rc, &rd, DType::kF32).ok());
  EXPECT_EQ(recv[0], 1.f);
  EXPECT_EQ(recv[2], 3.f);
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
    EXPECT_EQ(ep_members, (std::set<int>{t.RankOf(tp, dp / 2 * 2, pp),
                                         t.RankOf(tp, dp / 2 * 2 + 1, pp)}));
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
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<trainer::MpiRuntime> runtime;
  if (!trainer::MpiRuntime::Init(&argc, &argv, &runtime).ok()) return 1;
  trainer::g_runtime = runtime.get();
  // Only rank 0 prints results.
  if (runtime->rank() != 0) {
    ::testing::TestEventListeners& l = ::testing::UnitTest::GetInstance()->listeners();
    delete l.Release(l.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  // Every rank's verdict counts.
  if (!runtime->world()->AllReduce(&failed, 1, trainer::DType::kI32, trainer::ReduceOp::kMax).ok())
    failed = 1;
  runtime->Finalize();
  return failed;
}
