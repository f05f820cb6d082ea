// NcclCommunicator: the Communicator interface over NCCL, for device buffers. Every call enqueues
// on one CUDA stream (the backend's, so collectives are ordered with the kernels around them) and
// returns without waiting; Barrier() waits for the stream. The ncclUniqueId is made by the group's
// rank 0 and sent over MPI by the caller (nccl_bootstrap.h). Only in CUDA builds.
#pragma once

#if TRAINER_WITH_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "common/communicator.h"
#include "mpi_bootstrap/watchdog.h"

namespace trainer {

// Registered with the watchdogs (AsyncErrorSource) while it lives: a peer that died or a broken
// link ends the rank with NCCL's reason within a watchdog period, not after Engine.watchdog_s.
class NcclCommunicator final : public Communicator, public AsyncErrorSource {
 public:
  // ncclCommInitRank on the current CUDA device (bind the device first). Collectives go on
  // `stream`; nullptr means the legacy default stream; own_stream: a new stream of its own
  // (ordered against the compute stream with StartAfter/FinishBefore).
  static Status Create(const ncclUniqueId& id, int rank, int size, std::string name,
                       cudaStream_t stream, std::unique_ptr<NcclCommunicator>* out,
                       bool own_stream = false);
  static Status Create(const ncclUniqueId& id, int rank, int size, std::string name,
                       std::unique_ptr<NcclCommunicator>* out) {
    return Create(id, rank, size, std::move(name), nullptr, out);
  }
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  bool device_memory() const override { return true; }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t comm() const { return comm_; }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override;
  Status AllGather(const void* send, void* recv, size_t count, DType dtype) override;
  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype) override;
  Status Broadcast(void* data, size_t count, DType dtype, int root) override;
  Status Send(const void* data, size_t count, DType dtype, int peer) override;
  Status Recv(void* data, size_t count, DType dtype, int peer) override;
  // Both in one NCCL group; a side whose peer is negative or count is 0 is skipped.
  Status SendRecv(const void* send, size_t send_count, int send_peer, void* recv, size_t recv_count,
                  int recv_peer, DType dtype) override;
  // Waits until every member got here and all earlier work on the stream is done.
  Status Barrier() override;
  Status AllReduceGroup(const std::vector<Tensor>& tensors, ReduceOp op) override;
  // Grouped ncclSend/ncclRecv, one pair per member with a non-zero count.
  Status AllToAllV(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                   void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                   DType dtype) override;
  // Through a device buffer of its own (grown on first use); waits for the stream, since the
  // counts are wanted on the host.
  Status AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) override;
  Status StartAfter(void* stream) override;
  Status FinishBefore(void* stream) override;

  // An error that NCCL found asynchronously (a peer died, a network failure), as a Status.
  Status CheckAsyncError();
  // AsyncErrorSource: CheckAsyncError's message, or "".
  std::string AsyncError() override;
  // Aborts outstanding operations (for a watchdog that found a stuck collective); the
  // communicator is unusable afterwards.
  void Abort();

 private:
  NcclCommunicator(int rank, int size, std::string name, cudaStream_t stream)
      : rank_(rank), size_(size), name_(std::move(name)), stream_(stream) {}
  Status Check(ncclResult_t result, const char* call);

  int rank_;
  int size_;
  std::string name_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  float* barrier_value_ = nullptr;  // one device float all-reduced by Barrier()
  int64_t* counts_ = nullptr;       // AllToAllCounts' send and receive blocks on the device
  size_t counts_capacity_ = 0;      // int64 each half of counts_ holds
  bool owns_stream_ = false;
  cudaEvent_t order_event_ = nullptr;  // for StartAfter / FinishBefore
};

}  // namespace trainer

#endif  // TRAINER_WITH_CUDA
