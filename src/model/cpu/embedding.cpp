// Token + position embedding: the forward and backward kernels (vocabulary-parallel: this rank
// holds wte rows [vocab_start, vocab_start + V)) and the CpuBackend Embedding* ops.
#include <algorithm>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, int vocab_start, int V) {
  const int64_t N = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < N; ++bt) {
    float* o = out + bt * C;  // (C)
    const int64_t row = static_cast<int64_t>(tokens[bt]) - vocab_start;
    if (row >= 0 && row < V) {
      std::copy(wte + row * C, wte + row * C + C, o);
    } else {
      std::fill(o, o + C, 0.f);
    }
    if (wpe != nullptr) {
      const float* p = wpe + (bt % T) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] += p[c];
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int V) {
  const int64_t N = static_cast<int64_t>(B) * T;
  // dwte: each thread owns a range of columns and walks the tokens in order (no atomics).
  constexpr int kColumnChunk = 32;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += kColumnChunk) {
    const int c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t bt = 0; bt < N; ++bt) {
      const int64_t row = static_cast<int64_t>(tokens[bt]) - vocab_start;
      if (row < 0 || row >= V) continue;
      float* d = dwte + row * C;
      const float* g = dout + bt * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
  if (dwpe == nullptr) return;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* d = dwpe + static_cast<int64_t>(t) * C;
    for (int b = 0; b < B; ++b) {
      const float* g = dout + (static_cast<int64_t>(b) * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) d[c] += g[c];
    }
  }
}

}  // namespace cpu

Status CpuBackend::RunEmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                                       int vocab_start) {
  cpu::embedding_forward(out.as<float>(), tokens.as<int32_t>(), wte.as<float>(),
                         wpe.empty() ? nullptr : wpe.as<float>(), static_cast<int>(tokens.dim(0)),
                         static_cast<int>(tokens.dim(1)), static_cast<int>(wte.dim(1)), vocab_start,
                         static_cast<int>(wte.dim(0)));
  return Status::Ok();
}

Status CpuBackend::RunEmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                        int vocab_start) {
  cpu::embedding_backward(dwte.as<float>(), dwpe.empty() ? nullptr : dwpe.as<float>(),
                          dout.as<float>(), tokens.as<int32_t>(), static_cast<int>(tokens.dim(0)),
                          static_cast<int>(tokens.dim(1)), static_cast<int>(dwte.dim(1)),
                          vocab_start, static_cast<int>(dwte.dim(0)));
  return Status::Ok();
}

}  // namespace trainer
