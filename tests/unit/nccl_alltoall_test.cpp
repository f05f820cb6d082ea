// NcclCommunicator's all-to-all (grouped ncclSend/ncclRecv with uneven and zero counts) and its
// counts exchange, on device memory, against the closed form of mpi_alltoall_test. Run under
// mpiexec: the first min(ranks, GPUs) ranks take part, one GPU each (1 GPU: a group of one,
// which still sends to itself); exits 77 (CTest's skip) without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "mpi_bootstrap/mpi_runtime.h"
#include "mpi_bootstrap/nccl_bootstrap.h"

namespace trainer {
namespace {

Communicator* g_nccl = nullptr;

// Member s sends (s + p) % 3 elements (some zero) to member p: s * 1000 + p * 100 + i.
int64_t Count(int s, int p) { return (s + p) % 3; }

TEST(NcclAllToAll, UnevenCountsArriveInOrder) {
  const int n = g_nccl->size(), me = g_nccl->rank();
  std::vector<int64_t> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  std::vector<float> send;
  for (int p = 0; p < n; ++p) {
    send_counts[p] = Count(me, p);
    send_displs[p] = static_cast<int64_t>(send.size()) + 1;  // a gap: displacements are used
    send.push_back(-1.f);
    for (int64_t i = 0; i < send_counts[p]; ++i) send.push_back(me * 1000.f + p * 100.f + i);
  }
  ASSERT_TRUE(g_nccl->AllToAllCounts(send_counts.data(), recv_counts.data(), 1).ok());
  int64_t total = 0;
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ(recv_counts[s], Count(s, me));
    recv_displs[s] = total;
    total += recv_counts[s];
  }
  std::vector<float> recv(total + 1, -7.f);
  void *dsend = nullptr, *drecv = nullptr;
  ASSERT_EQ(cudaMalloc(&dsend, send.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&drecv, recv.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dsend, send.data(), send.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(drecv, recv.data(), recv.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(g_nccl
                  ->AllToAllV(dsend, send_counts.data(), send_displs.data(), drecv,
                              recv_counts.data(), recv_displs.data(), DType::kF32)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(recv.data(), drecv, recv.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int s = 0; s < n; ++s)
    for (int64_t i = 0; i < Count(s, me); ++i)
      EXPECT_EQ(recv[recv_displs[s] + i], s * 1000.f + me * 100.f + i) << "from " << s;
  EXPECT_EQ(recv[total], -7.f);  // nothing past the received elements
  cudaFree(dsend);
  cudaFree(drecv);
}

TEST(NcclAllToAll, CountsExchangeOfSeveralPerPeer) {
  const int n = g_nccl->size(), me = g_nccl->rank(), per = 3;
  std::vector<int64_t> send(n * per), recv(n * per, -1);
  for (int p = 0; p < n; ++p)
    for (int j = 0; j < per; ++j) send[p * per + j] = (int64_t{me} << 40) + p * 10 + j;
  ASSERT_TRUE(g_nccl->AllToAllCounts(send.data(), recv.data(), per).ok());
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < per; ++j) EXPECT_EQ(recv[s * per + j], (int64_t{s} << 40) + me * 10 + j);
}

}  // namespace
}  // namespace trainer

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<trainer::MpiRuntime> runtime;
  if (!trainer::MpiRuntime::Init(&argc, &argv, &runtime).ok()) return 1;
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
      if (runtime->rank() != 0) {
        ::testing::TestEventListeners& l = ::testing::UnitTest::GetInstance()->listeners();
        delete l.Release(l.default_result_printer());
      }
      failed = RUN_ALL_TESTS();
    }
  }
  if (!runtime->world()->AllReduce(&failed, 1, trainer::DType::kI32, trainer::ReduceOp::kMax).ok())
    failed = 1;
  runtime->Finalize();
  return failed;
}
