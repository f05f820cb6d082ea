// UploadRing: small host data (a grouped GEMM's pointer arrays or tile lists) copied to the device
// in stream order, once per call, without waiting for the GPU: a ring of kSlots pinned host slots
// (an event per slot says when its copy has been consumed) copied into a ring of device slots. The
// slots grow on first use of more bytes (the first step), so the step loop does not allocate.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "common/status.h"

namespace trainer {
namespace cuda {

class UploadRing {
 public:
  // Slots of `slot_bytes` to start with, on `stream`.
  static Status Create(cudaStream_t stream, size_t slot_bytes, std::unique_ptr<UploadRing>* out);
  ~UploadRing();
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;

  // Enqueues the copy of `bytes` at `data` to the device; *device is where it lands (256-byte
  // aligned), valid for the work enqueued after it until kSlots - 1 more uploads (a later upload
  // that grows the slots keeps the old device slots until the ring is destroyed).
  Status Upload(const void* data, size_t bytes, void** device);

 private:
  static constexpr int kSlots = 4;
  UploadRing() = default;
  // Room for `bytes` in every slot of both rings.
  Status Reserve(size_t bytes);

  cudaStream_t stream_ = nullptr;
  size_t slot_bytes_ = 0;
  char* host_ = nullptr;           // kSlots pinned slots
  char* device_ = nullptr;         // kSlots device slots
  std::vector<char*> retired_;     // device slots before a growth: earlier uploads may be unread
  cudaEvent_t free_[kSlots] = {};  // slot i's last copy has been consumed
  int next_ = 0;
};

}  // namespace cuda
}  // namespace trainer
