// UploadRing (upload_ring.h): pinned slots, device slots, an event per slot.
#include "model/cuda/upload_ring.h"

#include <cstring>

#include "model/cuda/cuda_check.h"

namespace trainer {
namespace cuda {

Status UploadRing::Create(cudaStream_t stream, size_t slot_bytes,
                          std::unique_ptr<UploadRing>* out) {
  std::unique_ptr<UploadRing> ring(new UploadRing());
  ring->stream_ = stream;
  for (cudaEvent_t& e : ring->free_)
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  TRAINER_RETURN_IF_ERROR(ring->Reserve(slot_bytes));
  *out = std::move(ring);
  return Status::Ok();
}

UploadRing::~UploadRing() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : free_)
    if (e) cudaEventDestroy(e);
  if (host_) cudaFreeHost(host_);
  if (device_) cudaFree(device_);
  for (char* d : retired_) cudaFree(d);
}

Status UploadRing::Reserve(size_t bytes) {
  bytes = (bytes + 255) / 256 * 256;  // every slot 256-byte aligned
  if (bytes <= slot_bytes_) return Status::Ok();
  // The old host slots may still be read by copies in flight; the old device slots also by work
  // not enqueued yet (an earlier upload of the same call), so they are kept (growth is rare).
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (host_) CUDA_CHECK(cudaFreeHost(host_));
  if (device_) retired_.push_back(device_);
  host_ = nullptr, device_ = nullptr, slot_bytes_ = 0;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), kSlots * bytes));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_), kSlots * bytes));
  slot_bytes_ = bytes;
  return Status::Ok();
}

Status UploadRing::Upload(const void* data, size_t bytes, void** device) {
  TRAINER_RETURN_IF_ERROR(Reserve(bytes));
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  char* host = host_ + slot * slot_bytes_;
  *device = device_ + slot * slot_bytes_;
  CUDA_CHECK(cudaEventSynchronize(free_[slot]));  // its copy kSlots uploads ago has been consumed
  std::memcpy(host, data, bytes);
  CUDA_CHECK(cudaMemcpyAsync(*device, host, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(free_[slot], stream_));
  return Status::Ok();
}

}  // namespace cuda
}  // namespace trainer
