// HostStagedCommunicator (host_staged_communicator.h).
#include "mpi_bootstrap/host_staged_communicator.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/agree.h"
#include "common/log.h"
#include "mpi_bootstrap/mpi_check.h"

#if TRAINER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace trainer {

#if TRAINER_WITH_CUDA
namespace {

class HostStagedCommunicator final : public Communicator {
 public:
  HostStagedCommunicator(std::unique_ptr<MpiCommunicator> group, int device)
      : owned_(std::move(group)), group_(owned_.get()), device_(device) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  const std::string& name() const override { return group_->name(); }
  bool device_memory() const override { return true; }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    TRAINER_RETURN_IF_ERROR(Ready());
    if (dtype == DType::kBF16) {
      TRAINER_RETURN_IF_ERROR(Widen(data, count, &wide_a_));
      TRAINER_RETURN_IF_ERROR(group_->AllReduce(wide_a_.data(), count, DType::kF32, op));
      return Narrow(data, wide_a_.data(), count);
    }
    const size_t bytes = count * DTypeSize(dtype);
    TRAINER_RETURN_IF_ERROR(ToHost(data, bytes, &a_));
    TRAINER_RETURN_IF_ERROR(group_->AllReduce(a_.data(), count, dtype, op));
    return ToDevice(data, a_.data(), bytes);
  }

  Status AllGather(const void* send, void* recv, size_t count, DType dtype) override {
    TRAINER_RETURN_IF_ERROR(Ready());
    const size_t block = count * DTypeSize(dtype), all = block * static_cast<size_t>(size());
    a_.resize(std::max(a_.size(), all));
    char* mine = a_.data() + block * static_cast<size_t>(rank());
    TRAINER_RETURN_IF_ERROR(Copy(mine, send, block, cudaMemcpyDeviceToHost));
    TRAINER_RETURN_IF_ERROR(group_->AllGather(mine, a_.data(), count, dtype));  // in place
    return ToDevice(recv, a_.data(), all);
  }

  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype) override {
    TRAINER_RETURN_IF_ERROR(Ready());
    const size_t all = count * static_cast<size_t>(size());
    if (dtype == DType::kBF16) {
      TRAINER_RETURN_IF_ERROR(Widen(send, all, &wide_a_));
      wide_b_.resize(std::max(wide_b_.size(), count));
      TRAINER_RETURN_IF_ERROR(
          group_->ReduceScatter(wide_a_.data(), wide_b_.data(), count, DType::kF32));
      return Narrow(recv, wide_b_.data(), count);
    }
    const size_t bytes = count * DTypeSize(dtype);
    TRAINER_RETURN_IF_ERROR(ToHost(send, all * DTypeSize(dtype), &a_));
    b_.resize(std::max(b_.size(), bytes));
    TRAINER_RETURN_IF_ERROR(group_->ReduceScatter(a_.data(), b_.data(), count, dtype));
    return ToDevice(recv, b_.data(), bytes);
  }

  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    TRAINER_RETURN_IF_ERROR(Ready());
    const size_t bytes = count * DTypeSize(dtype);
    if (rank() == root) {
      TRAINER_RETURN_IF_ERROR(ToHost(data, bytes, &a_));
    } else {
      a_.resize(std::max(a_.size(), bytes));
    }
    TRAINER_RETURN_IF_ERROR(group_->Broadcast(a_.data(), count, dtype, root));
    return rank() == root ? Status::Ok() : ToDevice(data, a_.data(), bytes);
  }

  Status Send(const void* data, size_t count, DType dtype, int peer) override {
    TRAINER_RETURN_IF_ERROR(Ready());
    TRAINER_RETURN_IF_ERROR(ToHost(data, count * DTypeSize(dtype), &a_));
    return group_->Send(a_.data(), count, dtype, peer);
  }

  Status Recv(void* data, size_t count, DType dtype, int peer) override {
    TRAINER_RETURN_IF_ERROR(Ready());
    const size_t bytes = count * DTypeSize(dtype);
    b_.resize(std::max(b_.size(), bytes));
    TRAINER_RETURN_IF_ERROR(group_->Recv(b_.data(), count, dtype, peer));
    return ToDevice(data, b_.data(), bytes);
  }

  // As NcclCommunicator's: a side whose peer is negative or count is 0 is skipped.
  Status SendRecv(const void* send, size_t send_count, int send_peer, void* recv,
                  size_t recv_count, int recv_peer, DType dtype) override {
    const bool sends = send_peer >= 0 && send_count > 0, receives = recv_peer >= 0 && recv_count > 0;
    if (sends && !receives) return Send(send, send_count, dtype, send_peer);
    if (receives && !sends) return Recv(recv, recv_count, dtype, recv_peer);
    if (!sends) return Status::Ok();
    TRAINER_RETURN_IF_ERROR(Ready());
    const size_t bytes = recv_count * DTypeSize(dtype);
    TRAINER_RETURN_IF_ERROR(ToHost(send, send_count * DTypeSize(dtype), &a_));
    b_.resize(std::max(b_.size(), bytes));
    TRAINER_RETURN_IF_ERROR(
        group_->SendRecv(a_.data(), send_count, send_peer, b_.data(), recv_count, recv_peer, dtype));
    return ToDevice(recv, b_.data(), bytes);
  }

  Status Barrier() override {
    TRAINER_RETURN_IF_ERROR(Ready());
    return group_->Barrier();
  }

  Status AllToAllV(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                   void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                   DType dtype) override {
    TRAINER_RETURN_IF_ERROR(Ready());
    const size_t elem = DTypeSize(dtype);
    int64_t send_end = 0, recv_end = 0;
    for (int p = 0; p < size(); ++p) {
      if (send_counts[p] > 0) send_end = std::max(send_end, send_displs[p] + send_counts[p]);
      if (recv_counts[p] > 0) recv_end = std::max(recv_end, recv_displs[p] + recv_counts[p]);
    }
    TRAINER_RETURN_IF_ERROR(ToHost(send, static_cast<size_t>(send_end) * elem, &a_));
    b_.resize(std::max(b_.size(), static_cast<size_t>(recv_end) * elem));
    TRAINER_RETURN_IF_ERROR(group_->AllToAllV(a_.data(), send_counts, send_displs, b_.data(),
                                              recv_counts, recv_displs, dtype));
    // Only the received blocks: what lies between them in `recv` stays as it was.
    for (int p = 0; p < size(); ++p) {
      if (recv_counts[p] <= 0) continue;
      const size_t at = static_cast<size_t>(recv_displs[p]) * elem;
      TRAINER_RETURN_IF_ERROR(Copy(static_cast<char*>(recv) + at, b_.data() + at,
                                   static_cast<size_t>(recv_counts[p]) * elem,
                                   cudaMemcpyHostToDevice));
    }
    return Synchronize("all-to-all");
  }

  // The counts are on the host already.
  Status AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) override {
    return group_->AllToAllCounts(send, recv, per_peer);
  }

 private:
  Status CudaError(const char* what, cudaError_t e) const {
    return RuntimeError(StrFormat("host-staged collective on group %s (rank %d): %s: %s",
                                  name().c_str(), rank(), what, cudaGetErrorString(e)));
  }
  Status Synchronize(const char* what) const {
    const cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? Status::Ok() : CudaError(what, e);
  }
  // Every call starts here: this thread on the group's device, and every stream's earlier work
  // done (which also orders the call after the kernels that made its input).
  Status Ready() const {
    const cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) return CudaError("cudaSetDevice", e);
    return Synchronize("waiting for the device");
  }
  Status Copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind) const {
    if (bytes == 0) return Status::Ok();
    const cudaError_t e = cudaMemcpy(to, from, bytes, kind);
    return e == cudaSuccess ? Status::Ok() : CudaError("cudaMemcpy", e);
  }
  Status ToHost(const void* device, size_t bytes, std::vector<char>* host) const {
    host->resize(std::max(host->size(), bytes));
    return Copy(host->data(), device, bytes, cudaMemcpyDeviceToHost);
  }
  // The copy, then the device idle: the kernels after the call see the data on every stream.
  Status ToDevice(void* device, const char* host, size_t bytes) const {
    TRAINER_RETURN_IF_ERROR(Copy(device, host, bytes, cudaMemcpyHostToDevice));
    return Synchronize("copy to the device");
  }
  Status Widen(const void* device, size_t count, std::vector<float>* wide) {
    TRAINER_RETURN_IF_ERROR(ToHost(device, count * sizeof(uint16_t), &a_));
    wide->resize(std::max(wide->size(), count));
    const uint16_t* h = reinterpret_cast<const uint16_t*>(a_.data());
    for (size_t i = 0; i < count; ++i) (*wide)[i] = BF16ToFloat(h[i]);
    return Status::Ok();
  }
  Status Narrow(void* device, const float* wide, size_t count) {
    b_.resize(std::max(b_.size(), count * sizeof(uint16_t)));
    uint16_t* h = reinterpret_cast<uint16_t*>(b_.data());
    for (size_t i = 0; i < count; ++i) h[i] = FloatToBF16(wide[i]);
    return ToDevice(device, b_.data(), count * sizeof(uint16_t));
  }

  std::unique_ptr<MpiCommunicator> owned_;
  MpiCommunicator* group_;
  int device_;
  std::vector<char> a_, b_;            // staged bytes
  std::vector<float> wide_a_, wide_b_;  // bf16 widened for a reduction
};

}  // namespace

Status MakeHostStagedCommunicator(MpiCommunicator* group, std::unique_ptr<Communicator>* out) {
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  Status status;
  if (e != cudaSuccess)
    status = RuntimeError(StrFormat("host-staged collectives for group %s: cudaGetDevice: %s",
                                    group->name().c_str(), cudaGetErrorString(e)));
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(group, status));
  // A communicator of its own, as NCCL's is: its collectives never pair with the host-side ones
  // that the group's members issue on `group` in between.
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(group->comm(), &dup));
  *out = std::make_unique<HostStagedCommunicator>(
      std::make_unique<MpiCommunicator>(dup, group->name(), true), device);
  return Status::Ok();
}

#else

Status MakeHostStagedCommunicator(MpiCommunicator* group, std::unique_ptr<Communicator>* out) {
  (void)group;
  (void)out;
  return EnvironmentError("Distributed.gpu_collectives=mpi needs a CUDA build of the trainer");
}

#endif

}  // namespace trainer
