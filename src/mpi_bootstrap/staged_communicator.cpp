// StagedCommunicator (staged_communicator.h).
#include "mpi_bootstrap/staged_communicator.h"

#include <algorithm>
#include <string>
#include <vector>

namespace trainer {
namespace {

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::unique_ptr<MpiCommunicator> group, std::unique_ptr<DeviceStaging> staging,
                     size_t chunk_bytes)
      : group_(std::move(group)),
        staging_(std::move(staging)),
        chunk_bytes_(std::max<size_t>(chunk_bytes, 4)) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  const std::string& name() const override { return group_->name(); }
  bool device_memory() const override { return true; }

  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    if (count == 0) return Status::Ok();  // every member passes the same count
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    const size_t elem = DTypeSize(dtype), step = Piece(dtype, 1);
    for (size_t at = 0; at < count; at += step) {
      const size_t n = std::min(step, count - at);
      char* part = static_cast<char*>(data) + at * elem;
      if (dtype == DType::kBF16) {
        TRAINER_RETURN_IF_ERROR(Widen(part, n, 0));
        TRAINER_RETURN_IF_ERROR(group_->AllReduce(wide_.data(), n, DType::kF32, op));
        TRAINER_RETURN_IF_ERROR(Narrow(part, wide_.data(), n));
      } else {
        TRAINER_RETURN_IF_ERROR(Down(part, n * elem, &a_, 0));
        TRAINER_RETURN_IF_ERROR(group_->AllReduce(a_.data(), n, dtype, op));
        TRAINER_RETURN_IF_ERROR(staging_->ToDevice(part, a_.data(), n * elem));
      }
    }
    return staging_->Done();
  }

  Status AllGather(const void* send, void* recv, size_t count, DType dtype) override {
    if (count == 0) return Status::Ok();
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    const size_t elem = DTypeSize(dtype), step = Piece(dtype, size());
    for (size_t at = 0; at < count; at += step) {
      // Columns [at, at + n) of every member's block; this rank's part sits in its slot, and the
      // in-place gather fills the others. In place (send is this rank's block of recv), the part
      // written back for this rank is the part just read.
      const size_t n = std::min(step, count - at), part = n * elem;
      a_.resize(std::max(a_.size(), part * static_cast<size_t>(size())));
      char* mine = a_.data() + part * static_cast<size_t>(rank());
      TRAINER_RETURN_IF_ERROR(
          staging_->ToHost(mine, static_cast<const char*>(send) + at * elem, part));
      TRAINER_RETURN_IF_ERROR(group_->AllGather(mine, a_.data(), n, dtype));
      for (int r = 0; r < size(); ++r)
        TRAINER_RETURN_IF_ERROR(staging_->ToDevice(
            static_cast<char*>(recv) + (static_cast<size_t>(r) * count + at) * elem,
            a_.data() + part * static_cast<size_t>(r), part));
    }
    return staging_->Done();
  }

  Status ReduceScatter(const void* send, void* recv, size_t count, DType dtype) override {
    if (count == 0) return Status::Ok();
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    const bool bf16 = dtype == DType::kBF16;
    const DType wire = bf16 ? DType::kF32 : dtype;
    const size_t elem = DTypeSize(dtype), step = Piece(dtype, size()), members = size();
    for (size_t at = 0; at < count; at += step) {
      // Columns [at, at + n) of every member's block, gathered into one host buffer in member
      // order. In place (recv is this rank's block of send), the part written is one already
      // read, and no later piece reads it.
      const size_t n = std::min(step, count - at);
      for (size_t r = 0; r < members; ++r) {
        const char* block = static_cast<const char*>(send) + (r * count + at) * elem;
        if (bf16) {
          TRAINER_RETURN_IF_ERROR(Widen(block, n, r * n));
        } else {
          TRAINER_RETURN_IF_ERROR(Down(block, n * elem, &a_, r * n * elem));
        }
      }
      char* out = static_cast<char*>(recv) + at * elem;
      if (bf16) {
        wide_out_.resize(std::max(wide_out_.size(), n));
        TRAINER_RETURN_IF_ERROR(group_->ReduceScatter(wide_.data(), wide_out_.data(), n, wire));
        TRAINER_RETURN_IF_ERROR(Narrow(out, wide_out_.data(), n));
      } else {
        b_.resize(std::max(b_.size(), n * elem));
        TRAINER_RETURN_IF_ERROR(group_->ReduceScatter(a_.data(), b_.data(), n, wire));
        TRAINER_RETURN_IF_ERROR(staging_->ToDevice(out, b_.data(), n * elem));
      }
    }
    return staging_->Done();
  }

  Status Broadcast(void* data, size_t count, DType dtype, int root) override {
    if (count == 0) return Status::Ok();
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    const size_t elem = DTypeSize(dtype), step = std::max<size_t>(chunk_bytes_ / elem, 1);
    for (size_t at = 0; at < count; at += step) {
      const size_t n = std::min(step, count - at);
      char* part = static_cast<char*>(data) + at * elem;
      a_.resize(std::max(a_.size(), n * elem));
      if (rank() == root) TRAINER_RETURN_IF_ERROR(staging_->ToHost(a_.data(), part, n * elem));
      TRAINER_RETURN_IF_ERROR(group_->Broadcast(a_.data(), n, dtype, root));
      if (rank() != root) TRAINER_RETURN_IF_ERROR(staging_->ToDevice(part, a_.data(), n * elem));
    }
    return staging_->Done();
  }

  Status Send(const void* data, size_t count, DType dtype, int peer) override {
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    TRAINER_RETURN_IF_ERROR(Down(data, count * DTypeSize(dtype), &a_, 0));
    return group_->Send(a_.data(), count, dtype, peer);
  }

  Status Recv(void* data, size_t count, DType dtype, int peer) override {
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    const size_t bytes = count * DTypeSize(dtype);
    b_.resize(std::max(b_.size(), bytes));
    TRAINER_RETURN_IF_ERROR(group_->Recv(b_.data(), count, dtype, peer));
    TRAINER_RETURN_IF_ERROR(staging_->ToDevice(data, b_.data(), bytes));
    return staging_->Done();
  }

  // As NcclCommunicator's: a side that SendRecvSideSkipped names is skipped.
  Status SendRecv(const void* send, size_t send_count, int send_peer, void* recv, size_t recv_count,
                  int recv_peer, DType dtype) override {
    const bool sends = !SendRecvSideSkipped(send_count, send_peer);
    const bool receives = !SendRecvSideSkipped(recv_count, recv_peer);
    if (sends && !receives) return Send(send, send_count, dtype, send_peer);
    if (receives && !sends) return Recv(recv, recv_count, dtype, recv_peer);
    if (!sends) return Status::Ok();
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    const size_t bytes = recv_count * DTypeSize(dtype);
    TRAINER_RETURN_IF_ERROR(Down(send, send_count * DTypeSize(dtype), &a_, 0));
    b_.resize(std::max(b_.size(), bytes));
    TRAINER_RETURN_IF_ERROR(group_->SendRecv(a_.data(), send_count, send_peer, b_.data(),
                                             recv_count, recv_peer, dtype));
    TRAINER_RETURN_IF_ERROR(staging_->ToDevice(recv, b_.data(), bytes));
    return staging_->Done();
  }

  Status Barrier() override {
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    return group_->Barrier();
  }

  Status AllToAllV(const void* send, const int64_t* send_counts, const int64_t* send_displs,
                   void* recv, const int64_t* recv_counts, const int64_t* recv_displs,
                   DType dtype) override {
    TRAINER_RETURN_IF_ERROR(staging_->Ready());
    const size_t elem = DTypeSize(dtype);
    int64_t send_end = 0, recv_end = 0;
    for (int p = 0; p < size(); ++p) {
      if (send_counts[p] > 0) send_end = std::max(send_end, send_displs[p] + send_counts[p]);
      if (recv_counts[p] > 0) recv_end = std::max(recv_end, recv_displs[p] + recv_counts[p]);
    }
    TRAINER_RETURN_IF_ERROR(Down(send, static_cast<size_t>(send_end) * elem, &a_, 0));
    b_.resize(std::max(b_.size(), static_cast<size_t>(recv_end) * elem));
    TRAINER_RETURN_IF_ERROR(group_->AllToAllV(a_.data(), send_counts, send_displs, b_.data(),
                                              recv_counts, recv_displs, dtype));
    // Only the received blocks: what lies between them in `recv` stays as it was.
    for (int p = 0; p < size(); ++p) {
      if (recv_counts[p] <= 0) continue;
      const size_t at = static_cast<size_t>(recv_displs[p]) * elem;
      TRAINER_RETURN_IF_ERROR(staging_->ToDevice(static_cast<char*>(recv) + at, b_.data() + at,
                                                 static_cast<size_t>(recv_counts[p]) * elem));
    }
    return staging_->Done();
  }

  // The counts are on the host already.
  Status AllToAllCounts(const int64_t* send, int64_t* recv, size_t per_peer) override {
    return group_->AllToAllCounts(send, recv, per_peer);
  }

 private:
  // Elements of a piece: `members` blocks of it, in the host buffers (f32 for bf16), fit a chunk.
  size_t Piece(DType dtype, int members) const {
    const size_t host_elem = dtype == DType::kBF16 ? sizeof(float) : DTypeSize(dtype);
    return std::max<size_t>(chunk_bytes_ / (host_elem * static_cast<size_t>(members)), 1);
  }
  // `bytes` from the device into `host` at byte `offset` (grown to fit).
  Status Down(const void* device, size_t bytes, std::vector<char>* host, size_t offset) {
    host->resize(std::max(host->size(), offset + bytes));
    return staging_->ToHost(host->data() + offset, device, bytes);
  }
  // n bf16 values from the device, widened into wide_ at element `offset`.
  Status Widen(const void* device, size_t n, size_t offset) {
    TRAINER_RETURN_IF_ERROR(Down(device, n * sizeof(uint16_t), &b_, 0));
    wide_.resize(std::max(wide_.size(), offset + n));
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b_.data());
    for (size_t i = 0; i < n; ++i) wide_[offset + i] = BF16ToFloat(h[i]);
    return Status::Ok();
  }
  // n f32 values rounded to bf16 onto the device.
  Status Narrow(void* device, const float* wide, size_t n) {
    b_.resize(std::max(b_.size(), n * sizeof(uint16_t)));
    uint16_t* h = reinterpret_cast<uint16_t*>(b_.data());
    for (size_t i = 0; i < n; ++i) h[i] = FloatToBF16(wide[i]);
    return staging_->ToDevice(device, b_.data(), n * sizeof(uint16_t));
  }

  std::unique_ptr<MpiCommunicator> group_;
  std::unique_ptr<DeviceStaging> staging_;
  size_t chunk_bytes_;
  std::vector<char> a_, b_;             // staged bytes
  std::vector<float> wide_, wide_out_;  // bf16 widened for a reduction
};

}  // namespace

std::unique_ptr<Communicator> MakeStagedCommunicator(std::unique_ptr<MpiCommunicator> group,
                                                     std::unique_ptr<DeviceStaging> staging,
                                                     size_t chunk_bytes) {
  return std::make_unique<StagedCommunicator>(std::move(group), std::move(staging), chunk_bytes);
}

}  // namespace trainer
