// StagedCommunicator (staged_communicator.h) under mpiexec, with a staging that copies host
// memory (the CUDA build copies device memory the same way): every collective in pieces of a few
// bytes (so that pieces split blocks and the last piece is short), checked against values each
// rank can write down from the ranks' numbers alone; in place and not; bf16 reductions; skipped
// sides of a send/recv; the all-to-all leaving the gaps of its output alone; and the staging
// waited for before every call and after every call that writes.
#include "mpi_bootstrap/staged_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <memory>
#include <vector>

#include "alltoall_cases.h"
#include "common/tensor.h"
#include "mpi_bootstrap/mpi_runtime.h"
#include "mpi_test_main.h"

namespace trainer {
namespace {

// Host memory standing in for device memory; counts the waits.
struct MemcpyStaging final : DeviceStaging {
  int* ready;
  int* done;
  MemcpyStaging(int* r, int* d) : ready(r), done(d) {}
  Status Ready() override {
    ++*ready;
    return Status::Ok();
  }
  Status ToHost(void* host, const void* device, size_t bytes) override {
    std::memcpy(host, device, bytes);
    return Status::Ok();
  }
  Status ToDevice(void* device, const void* host, size_t bytes) override {
    std::memcpy(device, host, bytes);
    return Status::Ok();
  }
  Status Done() override {
    ++*done;
    return Status::Ok();
  }
};

class StagedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // 12 bytes a piece: 3 floats of an all-reduce, 1 per member of a gather among 3 ranks.
    comm_ = Make(12);
    // 48 bytes: 4 floats per member of a gather among 3 ranks, so that a piece holds several
    // columns of each member's block and a block of 5 ends in a short piece.
    wide_ = Make(48);
    n_ = comm_->size();
    me_ = comm_->rank();
  }
  std::unique_ptr<Communicator> Make(size_t piece_bytes) {
    MPI_Comm dup = MPI_COMM_NULL;
    EXPECT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &dup), MPI_SUCCESS);
    return MakeStagedCommunicator(std::make_unique<MpiCommunicator>(dup, "staged", true),
                                  std::make_unique<MemcpyStaging>(&ready_, &done_), piece_bytes);
  }
  std::unique_ptr<Communicator> comm_, wide_;
  int ready_ = 0, done_ = 0, n_ = 0, me_ = 0;
};

// Rank r's value at element i.
float Value(int r, size_t i) {
  return static_cast<float>((r + 1) * 10 + static_cast<int>(i));
}

TEST_F(StagedTest, AllReduceInPiecesSumsAndMaxes) {
  const size_t count = 10;  // pieces of 3, 3, 3, 1
  std::vector<float> sum(count), max(count);
  for (size_t i = 0; i < count; ++i) sum[i] = max[i] = Value(me_, i);
  ASSERT_TRUE(comm_->AllReduce(sum.data(), count, DType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm_->AllReduce(max.data(), count, DType::kF32, ReduceOp::kMax).ok());
  for (size_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int r = 0; r < n_; ++r) expected += Value(r, i);
    EXPECT_EQ(sum[i], expected) << i;
    EXPECT_EQ(max[i], Value(n_ - 1, i)) << i;
  }
  EXPECT_EQ(ready_, 2);
  EXPECT_EQ(done_, 2);
}

TEST_F(StagedTest, Bf16AllReduceSumsInF32AndRoundsOnce) {
  // Element 0: 1 on rank 0 and 2^-8 on the others. Added one by one in bf16 (8 significant bits)
  // each 2^-8 is a tie that rounds back to 1; summed in f32 and rounded once it is 1 + 2^-7 on
  // three ranks. The other elements are small integers, exact either way.
  const size_t count = 7;
  std::vector<uint16_t> x(count);
  auto value = [](int r, size_t i) {
    return i == 0 ? (r == 0 ? 1.f : 0.00390625f) : static_cast<float>(r + static_cast<int>(i));
  };
  for (size_t i = 0; i < count; ++i) x[i] = FloatToBF16(value(me_, i));
  ASSERT_TRUE(comm_->AllReduce(x.data(), count, DType::kBF16, ReduceOp::kSum).ok());
  for (size_t i = 0; i < count; ++i) {
    float f32_sum = 0;
    for (int r = 0; r < n_; ++r) f32_sum += value(r, i);
    EXPECT_EQ(x[i], FloatToBF16(f32_sum)) << i;
  }
  if (n_ == 3) {
    EXPECT_EQ(BF16ToFloat(x[0]), 1.0078125f);
  }
}

// The all-gather of `count` f32 elements of each member, in place and not.
void ExpectAllGather(Communicator* comm, size_t count) {
  const int n = comm->size(), me = comm->rank();
  std::vector<float> send(count), recv(count * n, -1.f), in_place(count * n, -1.f);
  for (size_t i = 0; i < count; ++i) send[i] = in_place[me * count + i] = Value(me, i);
  ASSERT_TRUE(comm->AllGather(send.data(), recv.data(), count, DType::kF32).ok());
  ASSERT_TRUE(
      comm->AllGather(in_place.data() + me * count, in_place.data(), count, DType::kF32).ok());
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(recv[r * count + i], Value(r, i)) << r << " " << i;
      EXPECT_EQ(in_place[r * count + i], Value(r, i)) << r << " " << i;
    }
}

// The reduce-scatter of `count` elements to each member, f32 in place and not, and bf16.
void ExpectReduceScatter(Communicator* comm, size_t count) {
  const int n = comm->size(), me = comm->rank();
  std::vector<float> send(count * n), recv(count, -1.f), in_place(count * n);
  std::vector<uint16_t> half(count * n), half_out(count);
  for (size_t i = 0; i < count * n; ++i) {
    send[i] = in_place[i] = Value(me, i);
    half[i] = FloatToBF16(static_cast<float>(me + i));
  }
  ASSERT_TRUE(comm->ReduceScatter(send.data(), recv.data(), count, DType::kF32).ok());
  ASSERT_TRUE(
      comm->ReduceScatter(in_place.data(), in_place.data() + me * count, count, DType::kF32).ok());
  ASSERT_TRUE(comm->ReduceScatter(half.data(), half_out.data(), count, DType::kBF16).ok());
  for (size_t i = 0; i < count; ++i) {
    const size_t at = me * count + i;
    float expected = 0, f32_sum = 0;
    for (int r = 0; r < n; ++r) {
      expected += Value(r, at);
      f32_sum += BF16ToFloat(FloatToBF16(static_cast<float>(r + at)));
    }
    EXPECT_EQ(recv[i], expected) << i;
    EXPECT_EQ(in_place[at], expected) << i;
    EXPECT_EQ(half_out[i], FloatToBF16(f32_sum)) << i;
  }
}

TEST_F(StagedTest, AllGatherInPiecesInPlaceAndNot) {
  ExpectAllGather(comm_.get(), 4);  // pieces of 1 element per member among 3 ranks
  ExpectAllGather(wide_.get(), 5);  // pieces of 4 and 1
}

TEST_F(StagedTest, ReduceScatterInPiecesInPlaceAndNot) {
  ExpectReduceScatter(comm_.get(), 5);
  ExpectReduceScatter(wide_.get(), 5);
}

TEST_F(StagedTest, BroadcastInPiecesFromTheLastRank) {
  const size_t count = 7;
  std::vector<float> x(count);
  for (size_t i = 0; i < count; ++i) x[i] = Value(me_, i);
  ASSERT_TRUE(comm_->Broadcast(x.data(), count, DType::kF32, n_ - 1).ok());
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(x[i], Value(n_ - 1, i)) << i;
}

TEST_F(StagedTest, SendRecvAroundTheRingAndSkippedSides) {
  const size_t count = 6;
  std::vector<float> send(count), recv(count, -1.f);
  for (size_t i = 0; i < count; ++i) send[i] = Value(me_, i);
  const int next = (me_ + 1) % n_, previous = (me_ + n_ - 1) % n_;
  ASSERT_TRUE(
      comm_->SendRecv(send.data(), count, next, recv.data(), count, previous, DType::kF32).ok());
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(recv[i], Value(previous, i)) << i;
  // Rank 0 only sends (its receive side skipped by a negative peer), rank 1 only receives (its
  // send side skipped by a zero count), the others do nothing.
  std::vector<float> got(count, -1.f);
  Status s;
  if (me_ == 0) s = comm_->SendRecv(send.data(), count, 1, got.data(), count, -1, DType::kF32);
  if (me_ == 1) s = comm_->SendRecv(send.data(), 0, 2, got.data(), count, 0, DType::kF32);
  if (me_ > 1) s = comm_->SendRecv(send.data(), 0, -1, got.data(), 0, -1, DType::kF32);
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(got[i], me_ == 1 ? Value(0, i) : -1.f) << i;
}

TEST_F(StagedTest, AllToAllUnevenCountsLeaveTheGapsAlone) {
  ExpectUnevenAllToAll(comm_.get());
}

TEST_F(StagedTest, ZeroCountsDoNothing) {
  float x = 5.f;
  ASSERT_TRUE(comm_->AllReduce(&x, 0, DType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm_->ReduceScatter(&x, &x, 0, DType::kF32).ok());
  ASSERT_TRUE(comm_->AllGather(&x, &x, 0, DType::kF32).ok());
  EXPECT_EQ(x, 5.f);
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  return trainer::RunMpiTests(argc, argv);
}
