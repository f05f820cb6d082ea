// Expert parallelism's exchange (moe_dispatch.h) over an EP group simulated in one process: each
// member a thread with a communicator whose all-to-alls read the other members' posted buffers.
// Every member's dispatch plan is random (experts with no rows, a member sending nothing), and
// the result is checked against what each row must be by construction: a row carries its source
// member and its index in the source's permuted rows, so the receiving side can tell that its
// blocks came from the right members in rank order, that each run holds exactly the rows the
// source routed to that local expert (in token order), and that the return trip puts each
// expert output back on the row it came from.
#include "model/moe_dispatch.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "test_communicator.h"

namespace trainer {
namespace {

// What each member posts for one all-to-all, in elements.
struct Posted {
  const void* send = nullptr;
  const int64_t* counts = nullptr;
  const int64_t* displs = nullptr;
  size_t per = 0;  // AllToAllCounts: counts per peer
};

// Every member waits until all n have arrived (reusable, like C++20's std::barrier).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
    } else {
      all_arrived_.wait(lock, [&] { return generation_ != generation; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  const int n_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

struct SimulatedGroup {
  explicit SimulatedGroup(int n) : posted(n), sync(n) {}
  std::vector<Posted> posted;
  Barrier sync;
};

// One member: post, wait for every member, copy its blocks, wait again (so no member leaves
// while another still reads its buffers).
class SimulatedMember final : public TestCommunicator {
 public:
  SimulatedMember(SimulatedGroup* g, int rank, int size) : TestCommunicator(rank, size), g_(g) {}
  Status AllToAllCounts(const int64_t* send, int64_t* recv, size_t per) override {
    g_->posted[rank()] = {send, nullptr, nullptr, per};
    g_->sync.arrive_and_wait();
    for (int s = 0; s < size(); ++s)
      for (size_t j = 0; j < per; ++j)
        recv[s * per + j] = static_cast<const int64_t*>(g_->posted[s].send)[rank() * per + j];
    g_->sync.arrive_and_wait();
    return Status::Ok();
  }
  Status AllToAllV(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                   void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                   DType dtype) override {
    EXPECT_EQ(dtype, DType::kF32);
    g_->posted[rank()] = {send, send_counts, send_displs, 0};
    g_->sync.arrive_and_wait();
    for (int s = 0; s < size(); ++s) {
      const Posted& p = g_->posted[s];
      EXPECT_EQ(p.counts[rank()], recv_counts[s]) << "from " << s;
      const float* from = static_cast<const float*>(p.send) + p.displs[rank()];
      float* to = static_cast<float*>(recv) + recv_displs[s];
      for (int64_t i = 0; i < recv_counts[s]; ++i) to[i] = from[i];
    }
    g_->sync.arrive_and_wait();
    return Status::Ok();
  }

 private:
  SimulatedGroup* g_;
};

constexpr int64_t kCols = 3;

// Row i of member s's permuted rows: (s, i, s * 1000 + i).
float RowValue(int s, int64_t i, int64_t c) {
  return c == 0 ? static_cast<float>(s) : c == 1 ? static_cast<float>(i) : s * 1000.f + i;
}

// Member r of n with E experts: the plan, the exchange there and back (every collective first,
// so that a failing check on one member never leaves the others waiting), then the checks.
void RunMember(SimulatedGroup* g, int r, int n, int64_t E,
               const std::vector<std::vector<int64_t>>& offsets) {
  SimulatedMember comm(g, r, n);
  const int64_t El = E / n;
  const std::vector<int64_t>& mine = offsets[r];
  const int64_t rows = mine[E];
  int64_t capacity = 0;
  for (int s = 0; s < n; ++s) capacity += offsets[s][(r + 1) * El] - offsets[s][r * El];
  ExpertExchange x;
  std::vector<ExpertRun> runs;
  const Status planned = PlanExpertExchange(&comm, mine, capacity, kCols, &x, &runs);
  std::vector<float> x_perm(rows * kCols), x_recv(capacity * kCols, -1.f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < kCols; ++c) x_perm[i * kCols + c] = RowValue(r, i, c);
  const Status sent =
      ExchangeExpertRows(&comm, x, Tensor(x_perm.data(), DType::kF32, {rows, kCols}),
                         Tensor(x_recv.data(), DType::kF32, {capacity, kCols}), true);
  // The experts' outputs (2x + 1) go back to the rows they came from.
  std::vector<float> y_recv(capacity * kCols), y(rows * kCols, -1.f);
  for (size_t i = 0; i < y_recv.size(); ++i) y_recv[i] = 2 * x_recv[i] + 1;
  const Status returned =
      ExchangeExpertRows(&comm, x, Tensor(y_recv.data(), DType::kF32, {capacity, kCols}),
                         Tensor(y.data(), DType::kF32, {rows, kCols}), false);
  ASSERT_TRUE(planned.ok()) << planned.message();
  ASSERT_TRUE(sent.ok()) << sent.message();
  ASSERT_TRUE(returned.ok()) << returned.message();
  EXPECT_EQ(x.recv_total, capacity);
  // The runs: local expert by local expert, source members in rank order, each run the source's
  // rows for that expert in their order.
  size_t k = 0;
  for (int64_t e = 0; e < El; ++e) {
    for (int s = 0; s < n; ++s) {
      const int64_t begin = offsets[s][r * El + e], count = offsets[s][r * El + e + 1] - begin;
      if (count == 0) continue;
      ASSERT_LT(k, runs.size());
      const ExpertRun& run = runs[k++];
      EXPECT_EQ(run.expert, e);
      ASSERT_EQ(run.rows, count) << "local expert " << e << " from " << s;
      for (int64_t i = 0; i < count; ++i)
        for (int64_t c = 0; c < kCols; ++c)
          ASSERT_EQ(x_recv[(run.offset + i) * kCols + c], RowValue(s, begin + i, c))
              << "member " << r << " local expert " << e << " from " << s << " row " << i;
    }
  }
  EXPECT_EQ(k, runs.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < kCols; ++c)
      ASSERT_EQ(y[i * kCols + c], 2 * RowValue(r, i, c) + 1) << "member " << r << " row " << i;
}

class MoeDispatchTest : public ::testing::TestWithParam<std::pair<int, int64_t>> {};

TEST_P(MoeDispatchTest, RowsReachTheirExpertsAndComeBack) {
  const int n = GetParam().first;
  const int64_t E = GetParam().second;
  std::mt19937 rng(7 + n * 100 + static_cast<int>(E));
  for (int trial = 0; trial < 20; ++trial) {
    // Each member's group starts (E + 1): random group sizes with many empty experts; on trial
    // 0 member 0 routes nothing at all.
    std::vector<std::vector<int64_t>> offsets(n, std::vector<int64_t>(E + 1, 0));
    for (int s = 0; s < n; ++s)
      for (int64_t e = 0; e < E; ++e) {
        const int64_t size = (trial == 0 && s == 0) || rng() % 3 == 0 ? 0 : rng() % 7;
        offsets[s][e + 1] = offsets[s][e] + size;
      }
    SimulatedGroup group(n);
    std::vector<std::thread> members;
    for (int r = 0; r < n; ++r) members.emplace_back(RunMember, &group, r, n, E, offsets);
    for (std::thread& t : members) t.join();
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, MoeDispatchTest,
                         ::testing::Values(std::make_pair(2, int64_t{4}),
                                           std::make_pair(3, int64_t{6}),
                                           std::make_pair(4, int64_t{8}),
                                           std::make_pair(4, int64_t{4})));

// More rows arriving than the receiving buffers hold is an error naming the group.
TEST(MoeDispatch, RowsBeyondTheBuffersAreRefused) {
  const int n = 2;  // 2 experts, one on each member
  const std::vector<std::vector<int64_t>> offsets = {{0, 3, 5}, {0, 4, 4}};
  SimulatedGroup group(n);
  std::vector<Status> status(n, Status::Ok());
  std::vector<std::thread> members;
  for (int r = 0; r < n; ++r)
    members.emplace_back([&, r] {
      SimulatedMember comm(&group, r, n);
      ExpertExchange x;
      std::vector<ExpertRun> runs;
      status[r] = PlanExpertExchange(&comm, offsets[r], /*capacity_rows=*/6, kCols, &x, &runs);
    });
  for (std::thread& t : members) t.join();
  EXPECT_FALSE(status[0].ok());  // 3 + 4 rows for expert 0
  EXPECT_NE(status[0].message().find("7 rows arrive"), std::string::npos) << status[0].message();
  EXPECT_TRUE(status[1].ok());  // 2 + 0 rows for expert 1
}

}  // namespace
}  // namespace trainer
