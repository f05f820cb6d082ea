// PlanDeviceGroups (src/common/device_groups.h) against the MPI groups MpiRuntime::MakeGroups
// really splits, under mpiexec on 4 ranks: for every layout of 4 ranks (tp, sharding, ep,
// expert-dp and pp sizes whose product is 4) and both overlap settings, two groups share a
// communicator in the plan exactly when their MPI communicators hold the same ranks in the same
// order (MPI_Comm_compare: MPI_CONGRUENT) and neither runs on a stream of its own; each planned
// member count is the MPI group's size.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <vector>

#include "common/device_groups.h"
#include "mpi_bootstrap/mpi_runtime.h"
#include "mpi_test_main.h"

namespace trainer {
namespace {

MpiRuntime* g_runtime = nullptr;

bool Congruent(MpiCommunicator* a, MpiCommunicator* b) {
  int result = MPI_UNEQUAL;
  MPI_Comm_compare(a->comm(), b->comm(), &result);
  return result == MPI_CONGRUENT || result == MPI_IDENT;
}

TEST(MpiDeviceGroups, PlanSharesExactlyTheCongruentGroups) {
  ASSERT_EQ(g_runtime->size(), 4);
  const int factors[][5] = {// tp, sharding, ep, edp, pp
                            {4, 1, 1, 1, 1}, {1, 4, 1, 1, 1}, {1, 1, 4, 1, 1}, {1, 1, 1, 4, 1},
                            {1, 1, 1, 1, 4}, {2, 2, 1, 1, 1}, {2, 1, 2, 1, 1}, {2, 1, 1, 2, 1},
                            {2, 1, 1, 1, 2}, {1, 2, 2, 1, 1}, {1, 2, 1, 2, 1}, {1, 2, 1, 1, 2},
                            {1, 1, 2, 2, 1}, {1, 1, 2, 1, 2}, {1, 1, 1, 2, 2}};
  int shared = 0;
  for (const auto& f : factors) {
    Topology t;
    t.tp = f[0], t.sharding = f[1], t.ep = f[2], t.pp = f[4];
    t.dp = f[1] * f[2] * f[3];
    t.world_size = 4;
    ProcessGroups groups;
    ASSERT_TRUE(g_runtime->MakeGroups(t, &groups).ok());
    for (int overlap = 0; overlap < 4; ++overlap) {
      const std::vector<DeviceGroupSpec> specs =
          PlanDeviceGroups(t, groups.coord.pp, overlap & 1, overlap & 2);
      for (size_t i = 0; i < specs.size(); ++i) {
        SCOPED_TRACE(testing::Message()
                     << "tp " << f[0] << " sharding " << f[1] << " ep " << f[2] << " edp " << f[3]
                     << " pp " << f[4] << " overlap " << overlap << " group " << i);
        MpiCommunicator* mine = groups.Of(specs[i].group);
        EXPECT_EQ(mine == nullptr ? 0 : mine->size(), specs[i].members);
        int expected = -1;  // the first earlier own communicator with the same ranks
        for (size_t j = 0;
             j < i && expected < 0 && mine != nullptr && mine->size() > 1 && !specs[i].own_stream;
             ++j) {
          MpiCommunicator* other = groups.Of(specs[j].group);
          if (specs[j].shares < 0 && !specs[j].own_stream && other != nullptr &&
              Congruent(mine, other))
            expected = static_cast<int>(j);
        }
        EXPECT_EQ(specs[i].shares, expected);
        shared += expected >= 0;
      }
    }
  }
  EXPECT_GT(shared, 0);
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  return trainer::RunMpiTests(argc, argv, &trainer::g_runtime);
}
