// NcclCommunicator (nccl_communicator.h): each call maps to one NCCL call on the stream; failures
// become Status lines naming the group, the call, the rank and the host.
#if TRAINER_WITH_CUDA

#include "mpi_bootstrap/nccl_communicator.h"

#include <vector>

#include "common/log.h"

namespace trainer {

namespace {

// reduced: the type of a reduction. Raw 16-bit words (kU16, the master weights' remainders) move
// as any 2-byte type; reducing them means nothing, and the invalid type makes NCCL refuse it
// (ncclInvalidArgument, which Check reports).
ncclDataType_t NcclType(DType t, bool reduced = false) {
  switch (t) {
    case DType::kU16:
      return reduced ? ncclNumTypes : ncclFloat16;
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kF64:
      return ncclFloat64;
  }
  return ncclFloat32;
}

std::string Where(const std::string& group, int rank) {
  const ProcessIdentity& id = GetProcessIdentity();
  return StrFormat("group %s, member %d, rank %d on %s", group.c_str(), rank, id.rank,
                   id.host.c_str());
}

}  // namespace

Status NcclCommunicator::Create(const ncclUniqueId& id, int rank, int size, std::string name,
                                cudaStream_t stream, std::unique_ptr<NcclCommunicator>* out,
                                bool own_stream) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(rank, size, std::move(name), stream));
  if (own_stream) {
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->order_event_, cudaEventDisableTiming);
    if (e != cudaSuccess)
      return RuntimeError(StrFormat("NCCL communicator stream (%s): %s",
                                    Where(c->name_, rank).c_str(), cudaGetErrorString(e)));
    c->owns_stream_ = true;
  }
  const ncclResult_t r = ncclCommInitRank(&c->comm_, size, id, rank);
  if (r != ncclSuccess) {
    c->comm_ = nullptr;
    return EnvironmentError(StrFormat(
        "NCCL communicator setup (%s): ncclCommInitRank returned %s. Check that every rank of "
        "the group started, that each rank has its own GPU, and NCCL_DEBUG=INFO for details",
        Where(c->name_, rank).c_str(), ncclGetErrorString(r)));
  }
  const cudaError_t e = cudaMalloc(&c->barrier_value_, sizeof(float));
  if (e != cudaSuccess)
    return RuntimeError(StrFormat("NCCL barrier buffer (%s): cudaMalloc returned %s",
                                  Where(c->name_, rank).c_str(), cudaGetErrorString(e)));
  RegisterAsyncErrorSource(c.get());
  *out = std::move(c);
  return Status::Ok();
}

NcclCommunicator::~NcclCommunicator() {
  UnregisterAsyncErrorSource(this);
  if (owns_stream_) cudaStreamSynchronize(stream_);
  if (comm_) ncclCommDestroy(comm_);
  if (barrier_value_) cudaFree(barrier_value_);
  if (counts_) cudaFree(counts_);
  if (order_event_) cudaEventDestroy(order_event_);
  if (owns_stream_) cudaStreamDestroy(stream_);
}

Status NcclCommunicator::AllReduceGroup(const std::vector<Tensor>& tensors, ReduceOp op) {
  TRAINER_RETURN_IF_ERROR(Check(ncclGroupStart(), "all-reduce group start"));
  ncclResult_t first_error = ncclSuccess;
  for (const Tensor& t : tensors) {
    const ncclResult_t r =
        ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), NcclType(t.dtype, true),
                      op == ReduceOp::kMax ? ncclMax : ncclSum, comm_, stream_);
    if (first_error == ncclSuccess) first_error = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  TRAINER_RETURN_IF_ERROR(Check(first_error, "all-reduce (group)"));
  return Check(end, "all-reduce group");
}

// Record on one stream, wait on the other: device-side ordering, the host does not block.
static Status OrderStreams(cudaEvent_t event, cudaStream_t first, cudaStream_t then,
                           const std::string& where) {
  cudaError_t e = cudaEventRecord(event, first);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(then, event, 0);
  if (e != cudaSuccess)
    return RuntimeError(
        StrFormat("stream ordering (%s): %s", where.c_str(), cudaGetErrorString(e)));
  return Status::Ok();
}

Status NcclCommunicator::StartAfter(void* stream) {
  if (!owns_stream_) return Status::Ok();
  return OrderStreams(order_event_, static_cast<cudaStream_t>(stream), stream_, name_);
}

Status NcclCommunicator::FinishBefore(void* stream) {
  if (!owns_stream_) return Status::Ok();
  return OrderStreams(order_event_, stream_, static_cast<cudaStream_t>(stream), name_);
}

Status NcclCommunicator::Check(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return Status::Ok();
  return RuntimeError(StrFormat(
      "NCCL %s failed (%s): %s (%s). Check the other ranks' errors, "
      "and NCCL_DEBUG=WARN for details",
      call, Where(name_, rank_).c_str(), ncclGetErrorString(result), ncclGetLastError(comm_)));
}

Status NcclCommunicator::AllReduce(void* data, size_t count, DType dtype, ReduceOp op) {
  return Check(ncclAllReduce(data, data, count, NcclType(dtype, true),
                             op == ReduceOp::kMax ? ncclMax : ncclSum, comm_, stream_),
               "all-reduce");
}

Status NcclCommunicator::AllGather(const void* send, void* recv, size_t count, DType dtype) {
  return Check(ncclAllGather(send, recv, count, NcclType(dtype), comm_, stream_), "all-gather");
}

Status NcclCommunicator::ReduceScatter(const void* send, void* recv, size_t count, DType dtype) {
  return Check(ncclReduceScatter(send, recv, count, NcclType(dtype, true), ncclSum, comm_, stream_),
               "reduce-scatter");
}

Status NcclCommunicator::Broadcast(void* data, size_t count, DType dtype, int root) {
  return Check(ncclBroadcast(data, data, count, NcclType(dtype), root, comm_, stream_),
               "broadcast");
}

Status NcclCommunicator::Send(const void* data, size_t count, DType dtype, int peer) {
  return Check(ncclSend(data, count, NcclType(dtype), peer, comm_, stream_), "send");
}

Status NcclCommunicator::Recv(void* data, size_t count, DType dtype, int peer) {
  return Check(ncclRecv(data, count, NcclType(dtype), peer, comm_, stream_), "recv");
}

Status NcclCommunicator::SendRecv(const void* send, size_t send_count, int send_peer, void* recv,
                                  size_t recv_count, int recv_peer, DType dtype) {
  TRAINER_RETURN_IF_ERROR(Check(ncclGroupStart(), "send-recv group start"));
  ncclResult_t send_result = ncclSuccess, recv_result = ncclSuccess;
  if (!SendRecvSideSkipped(send_count, send_peer))
    send_result = ncclSend(send, send_count, NcclType(dtype), send_peer, comm_, stream_);
  if (!SendRecvSideSkipped(recv_count, recv_peer))
    recv_result = ncclRecv(recv, recv_count, NcclType(dtype), recv_peer, comm_, stream_);
  const ncclResult_t end_result = ncclGroupEnd();
  TRAINER_RETURN_IF_ERROR(Check(send_result, "send (send-recv)"));
  TRAINER_RETURN_IF_ERROR(Check(recv_result, "recv (send-recv)"));
  return Check(end_result, "send-recv");
}

Status NcclCommunicator::AllToAllV(const void* send, const int64_t* send_counts,
                                   const int64_t* send_displs, void* recv,
                                   const int64_t* recv_counts, const int64_t* recv_displs,
                                   DType dtype) {
  const size_t bytes = DTypeSize(dtype);
  const ncclDataType_t type = NcclType(dtype);
  TRAINER_RETURN_IF_ERROR(Check(ncclGroupStart(), "all-to-all group start"));
  ncclResult_t first_error = ncclSuccess;
  for (int p = 0; p < size_; ++p) {
    ncclResult_t r = ncclSuccess;
    if (send_counts[p] > 0)
      r = ncclSend(static_cast<const char*>(send) + send_displs[p] * bytes,
                   static_cast<size_t>(send_counts[p]), type, p, comm_, stream_);
    if (first_error == ncclSuccess) first_error = r;
    if (recv_counts[p] > 0)
      r = ncclRecv(static_cast<char*>(recv) + recv_displs[p] * bytes,
                   static_cast<size_t>(recv_counts[p]), type, p, comm_, stream_);
    if (first_error == ncclSuccess) first_error = r;
  }
  const ncclResult_t end = ncclGroupEnd();
  TRAINER_RETURN_IF_ERROR(Check(first_error, "send/recv (all-to-all)"));
  return Check(end, "all-to-all");
}

Status NcclCommunicator::AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) {
  const size_t n = per_peer * static_cast<size_t>(size_), bytes = n * sizeof(int64_t);
  if (n > counts_capacity_) {
    if (counts_) cudaFree(counts_);
    counts_ = nullptr;
    const cudaError_t e = cudaMalloc(&counts_, 2 * bytes);
    if (e != cudaSuccess)
      return RuntimeError(StrFormat("NCCL counts buffer (%s): cudaMalloc returned %s",
                                    Where(name_, rank_).c_str(), cudaGetErrorString(e)));
    counts_capacity_ = n;
  }
  int64_t* dsend = counts_;
  int64_t* drecv = counts_ + counts_capacity_;
  cudaError_t e = cudaMemcpyAsync(dsend, send, bytes, cudaMemcpyHostToDevice, stream_);
  if (e != cudaSuccess)
    return RuntimeError(StrFormat("NCCL counts upload (%s): %s", Where(name_, rank_).c_str(),
                                  cudaGetErrorString(e)));
  std::vector<int64_t> counts(size_, static_cast<int64_t>(per_peer)), displs(size_);
  for (int p = 0; p < size_; ++p) displs[p] = static_cast<int64_t>(per_peer) * p;
  // int64 moved as pairs of int32 (NCCL moves bytes; no reduction here).
  for (int p = 0; p < size_; ++p) {
    counts[p] *= 2;
    displs[p] *= 2;
  }
  TRAINER_RETURN_IF_ERROR(AllToAllV(dsend, counts.data(), displs.data(), drecv, counts.data(),
                                    displs.data(), DType::kI32));
  e = cudaMemcpyAsync(recv, drecv, bytes, cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess)
    return RuntimeError(StrFormat("NCCL counts download (%s): %s", Where(name_, rank_).c_str(),
                                  cudaGetErrorString(e)));
  return Status::Ok();
}

Status NcclCommunicator::Barrier() {
  TRAINER_RETURN_IF_ERROR(
      Check(ncclAllReduce(barrier_value_, barrier_value_, 1, ncclFloat32, ncclSum, comm_, stream_),
            "barrier"));
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess)
    return RuntimeError(StrFormat("NCCL barrier (%s): waiting for the stream returned %s",
                                  Where(name_, rank_).c_str(), cudaGetErrorString(e)));
  return CheckAsyncError();
}

Status NcclCommunicator::CheckAsyncError() {
  ncclResult_t async_error = ncclSuccess;
  TRAINER_RETURN_IF_ERROR(Check(ncclCommGetAsyncError(comm_, &async_error), "error query"));
  return Check(async_error, "asynchronous operation");
}

std::string NcclCommunicator::AsyncError() {
  if (comm_ == nullptr) return "";
  const Status status = CheckAsyncError();
  return status.ok() ? "" : status.message();
}

void NcclCommunicator::Abort() {
  UnregisterAsyncErrorSource(this);  // before comm_ goes: the watchdog's thread may ask it
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace trainer

#endif  // TRAINER_WITH_CUDA
