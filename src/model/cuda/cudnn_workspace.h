// CudnnWorkspace: the one device workspace of a cuDNN user (fused attention, the fused GELU
// GEMM), grown only when a newly built graph or plan needs more, so never inside the step loop
// once every shape has been seen.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"
#include "model/cuda/cuda_check.h"

namespace trainer {
namespace cuda {

struct CudnnWorkspace {
  void* data = nullptr;
  int64_t bytes = 0;

  CudnnWorkspace() = default;
  CudnnWorkspace(const CudnnWorkspace&) = delete;
  CudnnWorkspace& operator=(const CudnnWorkspace&) = delete;
  ~CudnnWorkspace() {
    if (data) cudaFree(data);
  }

  // At least `need` bytes; the old workspace may still be in use by work queued on `stream`.
  Status Grow(int64_t need, cudaStream_t stream) {
    if (need <= bytes) return Status::Ok();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (data) CUDA_CHECK(cudaFree(data));
    data = nullptr;
    bytes = 0;
    CUDA_CHECK(cudaMalloc(&data, need));
    bytes = need;
    return Status::Ok();
  }
};

}  // namespace cuda
}  // namespace trainer
