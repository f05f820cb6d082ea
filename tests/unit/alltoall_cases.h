// The all-to-all cases that mpi_alltoall_test (host memory) and nccl_alltoall_test (device memory)
// both run, with values each member can write down from the members' numbers alone: member s sends
// (s + p) % 3 elements (some zero) to member p, element i being s * 1000 + p * 100 + i.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/communicator.h"

namespace trainer {

inline int64_t AllToAllCount(int s, int p) {
  return (s + p) % 3;
}

struct UnevenAllToAll {
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;
  // recv: a gap of one element before each received block and one past the last, to stay
  // untouched (-7)
  std::vector<float> send, recv;
  int64_t total = 0;  // recv's elements, gaps included

  // This member's send side (with a gap before each block: displacements are used), then the
  // counts exchange, which must give each member what it will receive, and the receive side, with
  // a gap before each block too.
  void Prepare(Communicator* comm) {
    const int n = comm->size(), me = comm->rank();
    send_counts.assign(n, 0);
    send_displs.assign(n, 0);
    recv_counts.assign(n, 0);
    recv_displs.assign(n, 0);
    for (int p = 0; p < n; ++p) {
      send_counts[p] = AllToAllCount(me, p);
      send_displs[p] = static_cast<int64_t>(send.size()) + 1;
      send.push_back(-1.f);
      for (int64_t i = 0; i < send_counts[p]; ++i) send.push_back(me * 1000.f + p * 100.f + i);
    }
    ASSERT_TRUE(comm->AllToAllCounts(send_counts.data(), recv_counts.data(), 1).ok());
    for (int s = 0; s < n; ++s) {
      EXPECT_EQ(recv_counts[s], AllToAllCount(s, me));
      recv_displs[s] = total + 1;
      total += 1 + recv_counts[s];
    }
    recv.assign(total + 1, -7.f);
  }

  void Check(const Communicator& comm) const {
    std::vector<bool> received(recv.size(), false);
    for (int s = 0; s < comm.size(); ++s)
      for (int64_t i = 0; i < AllToAllCount(s, comm.rank()); ++i) {
        EXPECT_EQ(recv[recv_displs[s] + i], s * 1000.f + comm.rank() * 100.f + i) << "from " << s;
        received[recv_displs[s] + i] = true;
      }
    for (size_t i = 0; i < recv.size(); ++i)  // the gaps and the element past the last block
      if (!received[i]) {
        EXPECT_EQ(recv[i], -7.f) << "at " << i;
      }
  }
};

// The uneven case on a communicator of host buffers (MPI, or staged through a host-memory
// staging): the counts exchange, the all-to-all, the check.
inline void ExpectUnevenAllToAll(Communicator* comm) {
  UnevenAllToAll c;
  c.Prepare(comm);
  ASSERT_TRUE(comm->AllToAllV(c.send.data(), c.send_counts.data(), c.send_displs.data(),
                              c.recv.data(), c.recv_counts.data(), c.recv_displs.data(),
                              DType::kF32)
                  .ok());
  c.Check(*comm);
}

// The counts exchange with several counts per peer (host memory on every communicator).
inline void ExpectCountsExchangeOfSeveralPerPeer(Communicator* comm) {
  const int n = comm->size(), me = comm->rank(), per = 3;
  std::vector<int64_t> send(n * per), recv(n * per, -1);
  for (int p = 0; p < n; ++p)
    for (int j = 0; j < per; ++j) send[p * per + j] = (int64_t{me} << 40) + p * 10 + j;
  ASSERT_TRUE(comm->AllToAllCounts(send.data(), recv.data(), per).ok());
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < per; ++j) EXPECT_EQ(recv[s * per + j], (int64_t{s} << 40) + me * 10 + j);
}

}  // namespace trainer
