// TimeBackToBack: the one timing of the GEMM tuner (matmul.cpp) and the benchmark programs.
// Milliseconds per run of `op` (a launch that returns true when it was accepted) over `runs`
// back-to-back launches after one untimed, between two CUDA events on `stream`, so that the host's
// work per launch overlaps the GPU's; -1 when a launch fails.
#pragma once

#include <cuda_runtime_api.h>

namespace trainer {
namespace cuda {

template <typename Op>
float TimeBackToBack(cudaStream_t stream, const Op& op, int runs) {
  if (!op()) return -1.f;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  bool ok = true;
  for (int r = 0; r < runs && ok; ++r) ok = op();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ok && cudaGetLastError() == cudaSuccess ? ms / runs : -1.f;
}

}  // namespace cuda
}  // namespace trainer
