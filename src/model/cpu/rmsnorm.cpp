// RMSNorm over the last dimension (Hugging Face's LlamaRMSNorm: out = weight * (x * rstd),
// rstd = 1/sqrt(mean(x^2) + eps)) and Qwen3's per-head q/k norm (the same RMSNorm on each q and k
// head of a qkv row): forward and backward kernels and the CpuBackend hooks. Row statistics are
// accumulated in double; the weight gradients are reduced over rows by column ranges, in row
// order (no atomics), so the results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {
namespace {

constexpr int kColumnChunk = 32;  // weight-gradient columns per parallel task

// 1/sqrt(mean(x^2) + eps) of x (C), the squares summed in double.
inline float RmsRstd(const float* x, int C, float eps) {
  double sq = 0.0;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; ++c) sq += static_cast<double>(x[c]) * x[c];
  return static_cast<float>(1.0 / std::sqrt(sq / C + eps));
}

// o (C) = weight * (x * s).
inline void RmsScale(float* o, const float* x, const float* weight, float s, int C) {
#pragma omp simd
  for (int c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * s);
}

// The gradient of one normalised vector: with norm = x * s and dnorm = g * weight,
// dx = s * (dnorm - norm * mean(dnorm * norm)); written to d (+= when accumulate). d may alias g:
// the mean is formed before the first write.
inline void RmsRowBackward(float* d, const float* g, const float* x, const float* weight, float s,
                           int C, bool accumulate) {
  double dot = 0.0;
#pragma omp simd reduction(+ : dot)
  for (int c = 0; c < C; ++c) dot += (g[c] * weight[c]) * (x[c] * s);
  const float dnorm_norm_mean = static_cast<float>(dot / C);
  if (accumulate) {
#pragma omp simd
    for (int c = 0; c < C; ++c) d[c] += s * (g[c] * weight[c] - (x[c] * s) * dnorm_norm_mean);
  } else {
#pragma omp simd
    for (int c = 0; c < C; ++c) d[c] = s * (g[c] * weight[c] - (x[c] * s) * dnorm_norm_mean);
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t N,
                     int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float s = RmsRstd(in + n * C, C, eps);
    RmsScale(out + n * C, in + n * C, weight, s, C);
    rstd[n] = s;
  }
}

void rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in,
                      const float* weight, const float* rstd, int64_t N, int C) {
  // dweight (C) += sum over rows of dout * norm, by column ranges in row order.
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += kColumnChunk) {
    const int c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t n = 0; n < N; ++n) {
      const float* x = in + n * C;
      const float* g = dout + n * C;
      const float s = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; ++c) dweight[c] += g[c] * (x[c] * s);
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    RmsRowBackward(din + n * C, dout + n * C, in + n * C, weight, rstd[n], C, true);
}

void qk_norm_forward(float* out, float* rstd, const float* in, const float* q_weight,
                     const float* k_weight, int64_t N, int NH, int NKV, int HD, float eps) {
  const int heads = NH + NKV;                                // normalised heads per row
  const int64_t W = static_cast<int64_t>(heads + NKV) * HD;  // (NH+2*NKV)*HD
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = in + n * W;  // (NH+2*NKV, HD)
    float* o = out + n * W;
    for (int j = 0; j < heads; ++j) {
      const float* xj = x + static_cast<int64_t>(j) * HD;
      const float s = RmsRstd(xj, HD, eps);
      RmsScale(o + static_cast<int64_t>(j) * HD, xj, j < NH ? q_weight : k_weight, s, HD);
      rstd[n * heads + j] = s;
    }
    const int64_t v0 = static_cast<int64_t>(heads) * HD;  // the v heads, copied
    std::memcpy(o + v0, x + v0, sizeof(float) * NKV * HD);
  }
}

void qk_norm_backward(float* din, float* dq_weight, float* dk_weight, const float* dout,
                      const float* in, const float* q_weight, const float* k_weight,
                      const float* rstd, int64_t N, int NH, int NKV, int HD) {
  const int heads = NH + NKV;
  const int64_t W = static_cast<int64_t>(heads + NKV) * HD;
  // Weight gradients first (din may alias dout): dq_weight sums over the rows and, within a row,
  // over the q heads in order; dk_weight likewise over the k heads.
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < HD; c0 += kColumnChunk) {
    const int c1 = std::min(HD, c0 + kColumnChunk);
    for (int64_t n = 0; n < N; ++n) {
      for (int j = 0; j < heads; ++j) {
        const float* x = in + n * W + static_cast<int64_t>(j) * HD;
        const float* g = dout + n * W + static_cast<int64_t>(j) * HD;
        const float s = rstd[n * heads + j];
        float* dw = j < NH ? dq_weight : dk_weight;
#pragma omp simd
        for (int c = c0; c < c1; ++c) dw[c] += g[c] * (x[c] * s);
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    for (int j = 0; j < heads; ++j) {
      const int64_t off = n * W + static_cast<int64_t>(j) * HD;
      RmsRowBackward(din + off, dout + off, in + off, j < NH ? q_weight : k_weight,
                     rstd[n * heads + j], HD, false);
    }
    const int64_t v0 = n * W + static_cast<int64_t>(heads) * HD;
    if (din != dout) std::memcpy(din + v0, dout + v0, sizeof(float) * NKV * HD);
  }
}

}  // namespace cpu

// The shapes were checked by Backend (backend.cpp).
Status CpuBackend::RunRmsNormForward(Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) {
  cpu::rmsnorm_forward(out.as<float>(), rstd.as<float>(), in.as<float>(), weight.as<float>(),
                       Rows(in), static_cast<int>(Cols(in)), eps);
  return Status::Ok();
}

Status CpuBackend::RunRmsNormBackward(Tensor din, Tensor dweight, Tensor dout, Tensor in,
                                      Tensor weight, Tensor rstd) {
  cpu::rmsnorm_backward(din.as<float>(), dweight.as<float>(), dout.as<float>(), in.as<float>(),
                        weight.as<float>(), rstd.as<float>(), Rows(in), static_cast<int>(Cols(in)));
  return Status::Ok();
}

Status CpuBackend::RunQkNormForward(Tensor out, Tensor rstd, Tensor in, Tensor q_weight,
                                    Tensor k_weight, int num_heads, int num_kv_heads, float eps) {
  const int HD = static_cast<int>(Cols(in) / (num_heads + 2 * num_kv_heads));
  cpu::qk_norm_forward(out.as<float>(), rstd.as<float>(), in.as<float>(), q_weight.as<float>(),
                       k_weight.as<float>(), Rows(in), num_heads, num_kv_heads, HD, eps);
  return Status::Ok();
}

Status CpuBackend::RunQkNormBackward(Tensor din, Tensor dq_weight, Tensor dk_weight, Tensor dout,
                                     Tensor in, Tensor q_weight, Tensor k_weight, Tensor rstd,
                                     int num_heads, int num_kv_heads) {
  const int HD = static_cast<int>(Cols(in) / (num_heads + 2 * num_kv_heads));
  cpu::qk_norm_backward(din.as<float>(), dq_weight.as<float>(), dk_weight.as<float>(),
                        dout.as<float>(), in.as<float>(), q_weight.as<float>(),
                        k_weight.as<float>(), rstd.as<float>(), Rows(in), num_heads, num_kv_heads,
                        HD);
  return Status::Ok();
}

}  // namespace trainer
