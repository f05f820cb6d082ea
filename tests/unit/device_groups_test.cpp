// PlanDeviceGroups (src/common/device_groups.h) against the groups' member lists computed
// independently: for every rank of many layouts, a group shares an earlier group's communicator
// exactly when the two have the same ranks in the same order (Topology::Members, and the first and
// last stages of the rank's (tp, dp) coordinate for the embedding group) and neither runs on a
// stream of its own; its member count is the list's length.
#include "common/device_groups.h"

#include <gtest/gtest.h>

#include <vector>

namespace trainer {
namespace {

std::vector<int> MembersOf(const Topology& t, int rank, DeviceGroup g) {
  switch (g) {
    case DeviceGroup::kTp:
      return t.Members(rank, kDimTp);
    case DeviceGroup::kDp:
      return t.Members(rank, kDimSharding | kDimReplica);
    case DeviceGroup::kPp:
      return t.Members(rank, kDimPp);
    case DeviceGroup::kSharding:
      return t.Members(rank, kDimSharding);
    case DeviceGroup::kReplica:
      return t.Members(rank, kDimReplica);
    case DeviceGroup::kEp:
      return t.Members(rank, kDimEp);
    case DeviceGroup::kExpertDp:
      return t.Members(rank, kDimExpertDp);
    case DeviceGroup::kEmbedding: {
      const Topology::Coord c = t.CoordOf(rank);
      if (t.pp == 1 || (c.pp != 0 && c.pp != t.pp - 1)) return {};
      return {t.RankOf(c.tp, c.dp, 0), t.RankOf(c.tp, c.dp, t.pp - 1)};
    }
  }
  return {};
}

TEST(DeviceGroups, ShareExactlyWhenTheRanksAreTheSame) {
  int layouts = 0, shared = 0;
  for (int tp : {1, 2})
    for (int sharding : {1, 2})
      for (int ep : {1, 2})
        for (int edp : {1, 2, 3})
          for (int pp : {1, 2, 3})
            for (int overlap = 0; overlap < 4; ++overlap) {
              Topology t;
              t.tp = tp, t.sharding = sharding, t.ep = ep, t.pp = pp;
              t.dp = sharding * ep * edp;
              t.world_size = tp * t.dp * pp;
              ++layouts;
              for (int rank = 0; rank < t.world_size; ++rank) {
                const bool overlap_dp = overlap & 1, overlap_sharding = overlap & 2;
                const std::vector<DeviceGroupSpec> specs =
                    PlanDeviceGroups(t, t.CoordOf(rank).pp, overlap_dp, overlap_sharding);
                ASSERT_EQ(specs.size(), 8u);
                for (size_t i = 0; i < specs.size(); ++i) {
                  const std::vector<int> mine = MembersOf(t, rank, specs[i].group);
                  SCOPED_TRACE(testing::Message()
                               << "tp " << tp << " sharding " << sharding << " ep " << ep << " edp "
                               << edp << " pp " << pp << " rank " << rank << " group " << i);
                  const int n = static_cast<int>(mine.size());
                  EXPECT_EQ(specs[i].members, n == 1 ? 1 : n);
                  const bool own = (specs[i].group == DeviceGroup::kDp && overlap_dp) ||
                                   (specs[i].group == DeviceGroup::kSharding && overlap_sharding);
                  EXPECT_EQ(specs[i].own_stream, own);
                  // The first earlier group with the same ranks that has its own communicator.
                  int expected = -1;
                  for (size_t j = 0; j < i && expected < 0 && n > 1 && !own; ++j)
                    if (specs[j].shares < 0 && !specs[j].own_stream &&
                        MembersOf(t, rank, specs[j].group) == mine)
                      expected = static_cast<int>(j);
                  EXPECT_EQ(specs[i].shares, expected);
                  shared += expected >= 0;
                }
              }
            }
  EXPECT_EQ(layouts, 2 * 2 * 2 * 3 * 3 * 4);
  EXPECT_GT(shared, 0);
}

// A data-parallel-only layout of 8 GPUs builds one communicator where it built three (dp, the
// replicas, expert-dp); tp 2 x dp 4 with ep 2 on 8 GPUs: tp, dp (= the replicas), ep and
// expert-dp: 4, where it built 5.
TEST(DeviceGroups, CountsTheCommunicatorsBuilt) {
  Topology dp8;
  dp8.dp = 8, dp8.world_size = 8;
  EXPECT_EQ(CountOwnCommunicators(PlanDeviceGroups(dp8, 0, false, false)), 1);
  EXPECT_EQ(CountOwnCommunicators(PlanDeviceGroups(dp8, 0, true, false)), 2);
  Topology moe;
  moe.tp = 2, moe.ep = 2, moe.dp = 4, moe.world_size = 8;
  EXPECT_EQ(CountOwnCommunicators(PlanDeviceGroups(moe, 0, false, false)), 4);
}

}  // namespace
}  // namespace trainer
