// MakeNcclCommunicator's device communicator: its all-to-all (grouped ncclSend/ncclRecv with
// uneven and zero counts) and its counts exchange, on device memory, against the closed form of
// alltoall_cases.h. Run under mpiexec: the first min(ranks, GPUs) ranks take part, one GPU each.
// With 1 GPU the group has one member and gets a SelfCommunicator copying on the device instead
// of NCCL; its copies are checked on device memory too. Exits 77 (CTest's skip) without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "alltoall_cases.h"
#include "mpi_bootstrap/mpi_runtime.h"
#include "mpi_bootstrap/nccl_bootstrap.h"
#include "mpi_test_main.h"

namespace trainer {
namespace {

Communicator* g_nccl = nullptr;

TEST(NcclAllToAll, UnevenCountsArriveInOrder) {
  UnevenAllToAll c;
  c.Prepare(g_nccl);
  const size_t send_bytes = c.send.size() * sizeof(float), recv_bytes = c.recv.size() * 4;
  void *dsend = nullptr, *drecv = nullptr;
  ASSERT_EQ(cudaMalloc(&dsend, send_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&drecv, recv_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dsend, c.send.data(), send_bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(drecv, c.recv.data(), recv_bytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(g_nccl
                  ->AllToAllV(dsend, c.send_counts.data(), c.send_displs.data(), drecv,
                              c.recv_counts.data(), c.recv_displs.data(), DType::kF32)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.recv.data(), drecv, recv_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  c.Check(*g_nccl);
  cudaFree(dsend);
  cudaFree(drecv);
}

TEST(NcclAllToAll, CountsExchangeOfSeveralPerPeer) {
  ExpectCountsExchangeOfSeveralPerPeer(g_nccl);
}

// A group of one: the gather, the scatter and a send/recv to itself copy device memory (the
// values read back), the all-reduce leaves it as it is, and the barrier waits for the copies.
TEST(NcclAllToAll, OneMemberGroupCopiesOnTheDevice) {
  if (g_nccl->size() != 1) GTEST_SKIP() << "a group of " << g_nccl->size();
  EXPECT_TRUE(g_nccl->device_memory());
  const std::vector<float> host = {1, 2, 3, 4, 5, 6};
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), 6 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), 6 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, host.data(), 6 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(b, 0, 6 * sizeof(float)), cudaSuccess);
  ASSERT_TRUE(g_nccl->AllReduce(a, 6, DType::kF32, ReduceOp::kSum).ok());
  ASSERT_TRUE(g_nccl->AllGather(a, b, 2, DType::kF32).ok());                  // b[0..2) = 1 2
  ASSERT_TRUE(g_nccl->ReduceScatter(a + 2, b + 2, 2, DType::kF32).ok());      // b[2..4) = 3 4
  ASSERT_TRUE(g_nccl->SendRecv(a + 4, 2, 0, b + 4, 2, 0, DType::kF32).ok());  // b[4..6) = 5 6
  ASSERT_TRUE(g_nccl->Barrier().ok());
  std::vector<float> got(6, -1.f), kept(6, -1.f);
  ASSERT_EQ(cudaMemcpy(got.data(), b, 6 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(kept.data(), a, 6 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, host);
  EXPECT_EQ(kept, host);
  EXPECT_FALSE(g_nccl->SendRecv(a, 2, 1, b, 0, -1, DType::kF32).ok());  // no member 1
  cudaFree(a);
  cudaFree(b);
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  std::unique_ptr<trainer::MpiRuntime> runtime;
  if (!trainer::InitMpiTests(&argc, &argv, &runtime)) return 1;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus == 0) {
    if (runtime->rank() == 0) std::printf("no CUDA device visible: skipping\n");
    runtime->Finalize();
    return 77;
  }
  const int members = std::min(gpus, runtime->size());
  const bool member = runtime->rank() < members;
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, runtime->rank(), &comm);
  int failed = 0;
  if (member) {
    cudaSetDevice(runtime->rank());
    trainer::MpiCommunicator group(comm, "test", true);
    std::unique_ptr<trainer::Communicator> nccl;
    const trainer::Status s = trainer::MakeNcclCommunicator(&group, nullptr, &nccl);
    if (!s.ok()) {
      std::printf("NCCL setup: %s\n", s.message().c_str());
      failed = 1;
    } else {
      trainer::g_nccl = nccl.get();
      trainer::PrintResultsOnRankZeroOnly(runtime->rank());
      failed = RUN_ALL_TESTS();
    }
  }
  return trainer::WorldVerdict(runtime.get(), failed);
}
