// Communicator: the collective interface that the data loader, model, optimizer and checkpoint
// code use, so that none of them needs MPI or NCCL. Implementations: MpiCommunicator (host memory,
// CPU path), NcclCommunicator (device memory) and StagedCommunicator (device memory over MPI) in
// src/mpi_bootstrap/, and SelfCommunicator (one member, no library) here: single-process tests,
// and the device groups of one member (no NCCL communicator and its buffers for them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

namespace trainer {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name in error messages ("dp", "tp", "pp", "world", ...).
  virtual const std::string& name() const = 0;
  // True when buffers are device pointers (NCCL); false for host memory (MPI, self).
  virtual bool device_memory() const = 0;

  // In place over `count` elements of `dtype`.
  virtual Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;
  // recv holds size() * count elements, rank r's `count` at offset r * count. In place when send
  // is this rank's block of recv.
  virtual Status AllGather(const void* send, void* recv, size_t count, DType dtype) = 0;
  // send holds size() * count elements; recv gets the sum of every rank's block rank(). In place
  // when recv is this rank's block of send (NCCL's convention).
  virtual Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual Status Broadcast(void* data, size_t count, DType dtype, int root) = 0;
  virtual Status Send(const void* data, size_t count, DType dtype, int peer) = 0;
  virtual Status Recv(void* data, size_t count, DType dtype, int peer) = 0;
  // Send to send_peer and receive from recv_peer at once (no deadlock between two stages that
  // exchange in both directions, as the 1F1B pipeline schedule does). The device communicators
  // skip a side that SendRecvSideSkipped names (below).
  virtual Status SendRecv(const void* send, size_t send_count, int send_peer, void* recv,
                          size_t recv_count, int recv_peer, DType dtype) = 0;
  virtual Status Barrier() = 0;
  // All-to-all with per-peer counts (MPI_Alltoallv): send_counts[p] elements from
  // send + send_displs[p] go to member p, recv_counts[p] elements from member p land at
  // recv + recv_displs[p] (counts and displacements in elements of `dtype`, size() of each, on
  // the host). Zero counts are allowed; send and recv must not overlap.
  virtual Status AllToAllV(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                           void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                           DType dtype) = 0;
  // The counts exchange before an AllToAllV: send holds size() * per_peer int64 in host memory,
  // block p for member p; recv gets member p's block for this rank at block p.
  virtual Status AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) = 0;

  // Several in-place all-reduces issued together (one fused launch on NCCL).
  virtual Status AllReduceGroup(const std::vector<Tensor>& tensors, ReduceOp op) {
    for (const Tensor& t : tensors)
      TRAINER_RETURN_IF_ERROR(AllReduce(t.data, static_cast<size_t>(t.numel()), t.dtype, op));
    return Status::Ok();
  }
  // Stream ordering, for device communicators that run on a stream of their own (to overlap with
  // compute); no-ops elsewhere. StartAfter(s): the collectives issued next wait for the work
  // queued on stream s so far. FinishBefore(s): work queued on s from now on waits for the
  // collectives issued so far.
  virtual Status StartAfter(void* stream) { return Status::Ok(); }
  virtual Status FinishBefore(void* stream) { return Status::Ok(); }
};

// A side of a SendRecv with no peer (negative) or nothing to move, which the device communicators
// (NCCL's, the host-staged one, the one-member one) skip.
inline bool SendRecvSideSkipped(size_t count, int peer) {
  return count == 0 || peer < 0;
}

// A group of one: every collective is a copy or nothing, with no library. Copies go through
// `copy` where it is given (device memory: the CUDA build passes a copy on the backend's stream,
// nccl_bootstrap.cpp), else memmove on the host; Barrier() runs `wait` where it is given (the
// device's: waiting for that stream, as NCCL's barrier does). A send/recv side with a negative
// peer or count 0 is skipped, as on the others; a send/recv to itself copies; any other peer does
// not exist.
class SelfCommunicator final : public Communicator {
 public:
  using Copy = std::function<Status(void* to, const void* from, size_t bytes)>;
  using Wait = std::function<Status()>;
  explicit SelfCommunicator(std::string name = "self", Copy copy = nullptr, Wait wait = nullptr)
      : name_(std::move(name)), copy_(std::move(copy)), wait_(std::move(wait)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  bool device_memory() const override { return copy_ != nullptr; }
  Status AllReduce(void*, size_t, DType, ReduceOp) override { return Status::Ok(); }
  Status AllGather(const void* send, void* recv, size_t count, DType dtype) override {
    return Move(recv, send, count * DTypeSize(dtype));
  }
  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype) override {
    return Move(recv, send, count * DTypeSize(dtype));
  }
  Status Broadcast(void*, size_t, DType, int) override { return Status::Ok(); }
  Status Send(const void*, size_t count, DType, int peer) override {
    return SendRecvSideSkipped(count, peer) ? Status::Ok() : NoPeer(peer);
  }
  Status Recv(void*, size_t count, DType, int peer) override {
    return SendRecvSideSkipped(count, peer) ? Status::Ok() : NoPeer(peer);
  }
  Status SendRecv(const void* send, size_t send_count, int send_peer, void* recv, size_t recv_count,
                  int recv_peer, DType dtype) override {
    const bool sends = !SendRecvSideSkipped(send_count, send_peer);
    const bool receives = !SendRecvSideSkipped(recv_count, recv_peer);
    if (!sends && !receives) return Status::Ok();
    if (sends && receives && send_peer == 0 && recv_peer == 0 && send_count == recv_count)
      return Move(recv, send, send_count * DTypeSize(dtype));
    return NoPeer(sends && send_peer != 0 ? send_peer : recv_peer);
  }
  Status Barrier() override { return wait_ ? wait_() : Status::Ok(); }
  Status AllToAllV(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                   void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                   DType dtype) override {
    if (send_counts[0] != recv_counts[0])
      return RuntimeError("all-to-all on a one-member group (" + name_ + "): sends " +
                          std::to_string(send_counts[0]) + " but receives " +
                          std::to_string(recv_counts[0]));
    const size_t bytes = DTypeSize(dtype);
    return Move(static_cast<char*>(recv) + recv_displs[0] * bytes,
                static_cast<const char*>(send) + send_displs[0] * bytes, send_counts[0] * bytes);
  }
  Status AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) override {
    std::memmove(recv, send, per_peer * sizeof(int64_t));  // counts are on the host
    return Status::Ok();
  }

 private:
  // recv's bytes from send's (nothing in place or for 0 bytes).
  Status Move(void* to, const void* from, size_t bytes) {
    if (to == from || bytes == 0) return Status::Ok();
    if (copy_) return copy_(to, from, bytes);
    std::memmove(to, from, bytes);
    return Status::Ok();
  }
  Status NoPeer(int peer) const {
    return RuntimeError("send/recv on a one-member group (" + name_ + "): peer " +
                        std::to_string(peer) + " does not exist");
  }
  std::string name_;
  Copy copy_;
  Wait wait_;
};

}  // namespace trainer
