// TimeBackToBack: the one timing of the GEMM tuner (matmul.cpp) and the benchmark programs.
// Milliseconds per run of `op` (a launch that returns true when it was accepted) over `runs`
// back-to-back launches after one untimed, between two CUDA events on `stream`, so that the host's
// work per launch overlaps the GPU's; -1 when a launch fails.
// TimeInterleaved: the same for rival routes of one operation (the GELU GEMMs' routes), taken in
// turns, so that the GPU's clock, which the power limit moves within milliseconds, weighs on each
// route alike.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

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

// Milliseconds per run of each of `ops` over `rounds` rounds, each of which runs every op `runs`
// times back to back in turn, after one untimed run of each; -1 for an op whose launch fails.
inline std::vector<float> TimeInterleaved(cudaStream_t stream,
                                          const std::vector<std::function<bool()>>& ops,
                                          int rounds, int runs) {
  const size_t count = ops.size();
  std::vector<bool> ok(count);
  for (size_t i = 0; i < count; ++i) ok[i] = ops[i]();
  std::vector<cudaEvent_t> events(2 * count * rounds);
  for (cudaEvent_t& e : events) cudaEventCreate(&e);
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < count; ++i) {
      if (!ok[i]) continue;
      cudaEventRecord(events[2 * (round * count + i)], stream);
      for (int r = 0; r < runs && ok[i]; ++r) ok[i] = ops[i]();
      cudaEventRecord(events[2 * (round * count + i) + 1], stream);
    }
  cudaStreamSynchronize(stream);
  std::vector<float> ms(count, -1.f);
  for (size_t i = 0; i < count; ++i) {
    if (!ok[i]) continue;
    float total = 0;
    for (int round = 0; round < rounds; ++round) {
      float t = 0;
      cudaEventElapsedTime(&t, events[2 * (round * count + i)], events[2 * (round * count + i) + 1]);
      total += t;
    }
    ms[i] = total / (rounds * runs);
  }
  for (cudaEvent_t& e : events) cudaEventDestroy(e);
  if (cudaGetLastError() != cudaSuccess) ms.assign(count, -1.f);
  return ms;
}

}  // namespace cuda
}  // namespace trainer
