// Token + position embedding: the forward and backward kernels (vocabulary-parallel: this rank
// holds wte rows [vocab_start, vocab_start + V)) and the CpuBackend Embedding* ops.
#include <algorithm>

#include "common/log.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/op_checks.h"

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

namespace {

// Shared by both directions: x is out (forward) or dout (backward), table is wte or dwte, pos is
// wpe or dwpe.
Status CheckEmbeddingShapes(const char* op, const char* x_name, const Tensor& x,
                            const char* table_name, const Tensor& table, const char* pos_name,
                            const Tensor& pos, const Tensor& tokens) {
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, x_name, x, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, table_name, table, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "tokens", tokens, DType::kI32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSize(op, "tokens", tokens, "dimensions", tokens.ndim, 2));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSize(op, table_name, table, "dimensions", table.ndim, 2));
  TRAINER_RETURN_IF_ERROR(
      cpu::CheckAgree(op, x_name, x, table_name, table, "C", cpu::Cols(x), cpu::Cols(table)));
  TRAINER_RETURN_IF_ERROR(
      cpu::CheckAgree(op, x_name, x, "tokens", tokens, "B*T", cpu::Rows(x), tokens.numel()));
  if (pos.empty()) return Status::Ok();
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, pos_name, pos, DType::kF32));
  TRAINER_RETURN_IF_ERROR(
      cpu::CheckAgree(op, pos_name, pos, table_name, table, "C", cpu::Cols(pos), cpu::Cols(table)));
  if (cpu::Rows(pos) < tokens.dim(1))
    return cpu::OpError(op,
                        StrFormat("%s %s has fewer positions than tokens %s has steps", pos_name,
                                  pos.shape_string().c_str(), tokens.shape_string().c_str()));
  return Status::Ok();
}

}  // namespace

Status CpuBackend::EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                                    int vocab_start) {
  TRAINER_RETURN_IF_ERROR(
      CheckEmbeddingShapes("EmbeddingForward", "out", out, "wte", wte, "wpe", wpe, tokens));
  cpu::embedding_forward(out.as<float>(), tokens.as<int32_t>(), wte.as<float>(),
                         wpe.empty() ? nullptr : wpe.as<float>(), static_cast<int>(tokens.dim(0)),
                         static_cast<int>(tokens.dim(1)), static_cast<int>(wte.dim(1)), vocab_start,
                         static_cast<int>(wte.dim(0)));
  return Status::Ok();
}

Status CpuBackend::EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                     int vocab_start) {
  TRAINER_RETURN_IF_ERROR(
      CheckEmbeddingShapes("EmbeddingBackward", "dout", dout, "dwte", dwte, "dwpe", dwpe, tokens));
  cpu::embedding_backward(dwte.as<float>(), dwpe.empty() ? nullptr : dwpe.as<float>(),
                          dout.as<float>(), tokens.as<int32_t>(), static_cast<int>(tokens.dim(0)),
                          static_cast<int>(tokens.dim(1)), static_cast<int>(dwte.dim(1)),
                          vocab_start, static_cast<int>(dwte.dim(0)));
  return Status::Ok();
}

}  // namespace trainer
