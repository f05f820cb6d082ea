// MpiCommunicator's messages of more elements than one MPI call takes (MPI's counts are int):
// with the most per message set to 5, every collective and point-to-point transfer of 17-19
// elements goes in pieces, and each result is checked against the closed form every rank can
// write down from the ranks' numbers alone (the same calls with one message each as well).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "mpi_bootstrap/mpi_runtime.h"
#include "mpi_test_main.h"

namespace trainer {
namespace {

MpiRuntime* g_runtime = nullptr;

// A duplicate of the world whose messages hold at most `most` elements (0: the default).
class Pieces : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    MPI_Comm dup;
    ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &dup), MPI_SUCCESS);
    group_ = std::make_unique<MpiCommunicator>(dup, "pieces", true);
    group_->SetMostElementsPerMessage(GetParam());
    rank_ = group_->rank();
    size_ = group_->size();
  }
  // A value each rank can compute for any rank and index (exact in float).
  static float Value(int rank, size_t i) { return static_cast<float>(rank * 1000 + i); }

  std::unique_ptr<MpiCommunicator> group_;
  int rank_ = 0, size_ = 1;
};

constexpr size_t kCount = 17;  // 5 + 5 + 5 + 2 with pieces of 5

TEST_P(Pieces, AllReduceSumsEveryElement) {
  std::vector<float> data(kCount);
  for (size_t i = 0; i < kCount; ++i) data[i] = Value(rank_, i);
  ASSERT_TRUE(group_->AllReduce(data.data(), kCount, DType::kF32, ReduceOp::kSum).ok());
  for (size_t i = 0; i < kCount; ++i) {
    float sum = 0;
    for (int r = 0; r < size_; ++r) sum += Value(r, i);
    ASSERT_EQ(data[i], sum) << "element " << i;
  }
  std::vector<int32_t> most(kCount);
  for (size_t i = 0; i < kCount; ++i) most[i] = (rank_ + static_cast<int>(i)) % size_;
  ASSERT_TRUE(group_->AllReduce(most.data(), kCount, DType::kI32, ReduceOp::kMax).ok());
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(most[i], size_ - 1);
}

TEST_P(Pieces, AllGatherPlacesEveryBlock) {
  for (bool in_place : {false, true}) {
    std::vector<float> mine(kCount), all(kCount * size_, -1.0f);
    for (size_t i = 0; i < kCount; ++i) mine[i] = Value(rank_, i);
    const float* send = mine.data();
    if (in_place) {
      std::copy(mine.begin(), mine.end(), all.begin() + kCount * rank_);
      send = all.data() + kCount * rank_;
    }
    ASSERT_TRUE(group_->AllGather(send, all.data(), kCount, DType::kF32).ok());
    for (int r = 0; r < size_; ++r)
      for (size_t i = 0; i < kCount; ++i)
        ASSERT_EQ(all[r * kCount + i], Value(r, i)) << "in place " << in_place << " block " << r;
  }
}

TEST_P(Pieces, ReduceScatterLeavesEachRankItsSummedBlock) {
  for (bool in_place : {false, true}) {
    std::vector<float> send(kCount * size_), out(kCount, -1.0f);
    for (size_t i = 0; i < send.size(); ++i) send[i] = Value(rank_, i);
    float* recv = in_place ? send.data() + kCount * rank_ : out.data();
    ASSERT_TRUE(group_->ReduceScatter(send.data(), recv, kCount, DType::kF32).ok());
    for (size_t i = 0; i < kCount; ++i) {
      float sum = 0;
      for (int r = 0; r < size_; ++r) sum += Value(r, kCount * rank_ + i);
      ASSERT_EQ(recv[i], sum) << "in place " << in_place << " element " << i;
    }
  }
}

TEST_P(Pieces, BroadcastFromTheLastRank) {
  std::vector<float> data(kCount, -1.0f);
  if (rank_ == size_ - 1)
    for (size_t i = 0; i < kCount; ++i) data[i] = Value(rank_, i);
  ASSERT_TRUE(group_->Broadcast(data.data(), kCount, DType::kF32, size_ - 1).ok());
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(data[i], Value(size_ - 1, i));
}

// A ring: each rank sends 17 + its rank elements to the next and receives the previous one's,
// by Send and Recv (even ranks send first, then receive; odd ranks the other way round), then
// by SendRecv.
TEST_P(Pieces, RingTransfersOfUnevenSizes) {
  const int next = (rank_ + 1) % size_, previous = (rank_ + size_ - 1) % size_;
  const size_t sent = kCount + rank_, received = kCount + previous;
  std::vector<float> send(sent), recv(received, -1.0f);
  for (size_t i = 0; i < sent; ++i) send[i] = Value(rank_, i);
  const auto expect_previous = [&](const char* how) {
    for (size_t i = 0; i < received; ++i) ASSERT_EQ(recv[i], Value(previous, i)) << how << " " << i;
  };
  if (size_ > 1) {
    for (int turn = 0; turn < 2; ++turn) {
      if ((rank_ % 2 == 0) == (turn == 0)) {
        ASSERT_TRUE(group_->Send(send.data(), sent, DType::kF32, next).ok());
      } else {
        ASSERT_TRUE(group_->Recv(recv.data(), received, DType::kF32, previous).ok());
      }
    }
    expect_previous("send/recv");
  }
  std::fill(recv.begin(), recv.end(), -1.0f);
  ASSERT_TRUE(
      group_->SendRecv(send.data(), sent, next, recv.data(), received, previous, DType::kF32).ok());
  expect_previous("sendrecv");
}

INSTANTIATE_TEST_SUITE_P(MostPerMessage, Pieces, ::testing::Values(size_t{5}, size_t{0}));

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  return trainer::RunMpiTests(argc, argv, &trainer::g_runtime);
}
