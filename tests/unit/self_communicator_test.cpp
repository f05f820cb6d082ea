// SelfCommunicator (common/communicator.h), the group of one member: without a copy function it
// moves host memory; with one (the CUDA build's device groups of one rank, nccl_bootstrap.cpp)
// every copy goes through it, with the pointers and byte counts of the closed forms below, and
// nothing goes through it in place. Send/recv sides with a negative peer or no elements are
// skipped; a send/recv to itself copies; other peers are refused, naming the group.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/communicator.h"

namespace trainer {
namespace {

struct Recorded {
  void* to;
  const void* from;
  size_t bytes;
};

// A SelfCommunicator whose copies and waits are recorded (and carried out on host memory).
struct Recording {
  std::vector<Recorded> copies;
  int waits = 0;
  SelfCommunicator comm{"ep",
                        [this](void* to, const void* from, size_t bytes) {
                          copies.push_back({to, from, bytes});
                          std::memcpy(to, from, bytes);
                          return Status::Ok();
                        },
                        [this] {
                          ++waits;
                          return Status::Ok();
                        }};
};

TEST(SelfCommunicator, HostMemoryWithoutACopyFunction) {
  SelfCommunicator self("tp");
  EXPECT_FALSE(self.device_memory());
  EXPECT_EQ(self.size(), 1);
  EXPECT_EQ(self.name(), "tp");
  float a[3] = {1, 2, 3}, b[3] = {0, 0, 0};
  ASSERT_TRUE(self.AllGather(a, b, 3, DType::kF32).ok());
  EXPECT_EQ(b[2], 3.f);
  ASSERT_TRUE(self.AllReduce(a, 3, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_EQ(a[0], 1.f);  // its own sum
  // The all-to-all's one block, from send_displs[0] to recv_displs[0].
  const float send[4] = {9, 1, 2, 3};
  float recv[4] = {0, 0, 0, 0};
  const int64_t sc = 3, sd = 1, rc = 3, rd = 1;
  ASSERT_TRUE(self.AllToAllV(send, &sc, &sd, recv, &rc, &rd, DType::kF32).ok());
  EXPECT_EQ(recv[0], 0.f);
  EXPECT_EQ(recv[1], 1.f);
  EXPECT_EQ(recv[3], 3.f);
}

TEST(SelfCommunicator, CopiesGoThroughTheCopyFunction) {
  Recording r;
  EXPECT_TRUE(r.comm.device_memory());
  std::vector<float> x = {1, 2, 3, 4, 5}, y(5, 0.f);
  ASSERT_TRUE(r.comm.AllGather(x.data(), y.data(), 5, DType::kF32).ok());
  ASSERT_TRUE(r.comm.ReduceScatter(x.data() + 1, y.data(), 2, DType::kBF16).ok());
  ASSERT_EQ(r.copies.size(), 2u);
  EXPECT_EQ(r.copies[0].to, y.data());
  EXPECT_EQ(r.copies[0].from, x.data());
  EXPECT_EQ(r.copies[0].bytes, 20u);
  EXPECT_EQ(r.copies[1].from, x.data() + 1);
  EXPECT_EQ(r.copies[1].bytes, 4u);  // 2 bf16
  // In place, the all-reduce, the broadcast and empty calls copy nothing.
  ASSERT_TRUE(r.comm.AllGather(x.data(), x.data(), 5, DType::kF32).ok());
  ASSERT_TRUE(r.comm.ReduceScatter(x.data(), x.data(), 5, DType::kF32).ok());
  ASSERT_TRUE(r.comm.AllReduce(x.data(), 5, DType::kF32, ReduceOp::kMax).ok());
  ASSERT_TRUE(r.comm.Broadcast(x.data(), 5, DType::kF32, 0).ok());
  ASSERT_TRUE(r.comm.AllGather(x.data(), y.data(), 0, DType::kF32).ok());
  EXPECT_EQ(r.copies.size(), 2u);
  // The all-to-all: its one block, from send_displs[0] to recv_displs[0].
  const int64_t sc = 3, sd = 1, rc = 3, rd = 2;
  ASSERT_TRUE(r.comm.AllToAllV(x.data(), &sc, &sd, y.data(), &rc, &rd, DType::kF32).ok());
  ASSERT_EQ(r.copies.size(), 3u);
  EXPECT_EQ(r.copies[2].to, y.data() + 2);
  EXPECT_EQ(r.copies[2].from, x.data() + 1);
  EXPECT_EQ(r.copies[2].bytes, 12u);
  EXPECT_EQ(y[4], 4.f);
  // Its counts exchange is on the host, not through the copy function.
  const int64_t counts[2] = {7, 8};
  int64_t got[2] = {0, 0};
  ASSERT_TRUE(r.comm.AllToAllCounts(counts, got, 2).ok());
  EXPECT_EQ(got[1], 8);
  EXPECT_EQ(r.copies.size(), 3u);
  // The barrier waits (for the device's stream, in the CUDA build).
  ASSERT_TRUE(r.comm.Barrier().ok());
  EXPECT_EQ(r.waits, 1);
}

TEST(SelfCommunicator, SendRecvSkipsEmptySidesCopiesToItselfAndRefusesOtherPeers) {
  Recording r;
  float a[2] = {1, 2}, b[2] = {0, 0};
  ASSERT_TRUE(r.comm.SendRecv(a, 2, -1, b, 2, -1, DType::kF32).ok());
  ASSERT_TRUE(r.comm.SendRecv(a, 0, 1, b, 0, 1, DType::kF32).ok());
  ASSERT_TRUE(r.comm.Send(a, 2, DType::kF32, -1).ok());
  ASSERT_TRUE(r.comm.Recv(b, 0, DType::kF32, 3).ok());
  EXPECT_TRUE(r.copies.empty());
  ASSERT_TRUE(r.comm.SendRecv(a, 2, 0, b, 2, 0, DType::kF32).ok());
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(b[1], 2.f);
  for (const Status& s : {r.comm.SendRecv(a, 2, 1, b, 0, -1, DType::kF32),
                          r.comm.SendRecv(a, 0, -1, b, 2, 2, DType::kF32),
                          r.comm.Send(a, 2, DType::kF32, 0), r.comm.Recv(b, 2, DType::kF32, 1)}) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("one-member group (ep)"), std::string::npos) << s.message();
  }
  const int64_t sc = 2, zero = 0, rc = 1;
  EXPECT_FALSE(r.comm.AllToAllV(a, &sc, &zero, b, &rc, &zero, DType::kF32).ok());
}

}  // namespace
}  // namespace trainer
