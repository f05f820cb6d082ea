// NcclCommunicator's all-to-all (grouped ncclSend/ncclRecv with uneven and zero counts) and its
// counts exchange, on device memory, against the closed form of alltoall_cases.h. Run under
// mpiexec: the first min(ranks, GPUs) ranks take part, one GPU each (1 GPU: a group of one,
// which still sends to itself); exits 77 (CTest's skip) without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "alltoall_cases.h"
#include "mpi_bootstrap/mpi_runtime.h"
#include "mpi_test_main.h"
#include "mpi_bootstrap/nccl_bootstrap.h"

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
