// LayerNorm over the last dimension (eps 1e-5): forward and backward kernels and the CpuBackend
// LayerNorm* ops. Row statistics are accumulated in double; the parameter gradients are reduced
// over rows by column ranges, in row order (no atomics).
#include <algorithm>
#include <cmath>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                       const float* bias, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = in + n * C;  // (C)
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const double mu = sum / C;
    double sq = 0.0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += (x[c] - mu) * (x[c] - mu);
    const float m = static_cast<float>(mu);
    const float s = static_cast<float>(1.0 / std::sqrt(sq / C + kLayerNormEps));
    float* o = out + n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void layernorm_backward(float* din, float* dweight, float* dbias, const float* dout,
                        const float* in, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int C) {
  // Parameter gradients first, so that din may alias dout.
  constexpr int kColumnChunk = 32;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += kColumnChunk) {
    const int c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t n = 0; n < N; ++n) {
      const float* x = in + n * C;
      const float* g = dout + n * C;
      const float m = mean[n], s = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; ++c) {
        dweight[c] += g[c] * ((x[c] - m) * s);
        dbias[c] += g[c];
      }
    }
  }
  // din += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = in + n * C;
    const float* g = dout + n * C;
    const float m = mean[n], s = rstd[n];
    double dnorm_sum = 0.0, dnorm_norm_sum = 0.0;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
    for (int c = 0; c < C; ++c) {
      const float dnorm = g[c] * weight[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * ((x[c] - m) * s);
    }
    const float dnorm_mean = static_cast<float>(dnorm_sum / C);
    const float dnorm_norm_mean = static_cast<float>(dnorm_norm_sum / C);
    float* d = din + n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const float norm = (x[c] - m) * s;
      d[c] += s * (g[c] * weight[c] - dnorm_mean - norm * dnorm_norm_mean);
    }
  }
}

}  // namespace cpu

Status CpuBackend::RunLayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor in,
                                       Tensor weight, Tensor bias) {
  cpu::layernorm_forward(out.as<float>(), mean.as<float>(), rstd.as<float>(), in.as<float>(),
                         weight.as<float>(), bias.as<float>(), Rows(in),
                         static_cast<int>(Cols(in)));
  return Status::Ok();
}

Status CpuBackend::RunLayerNormBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor din_sums,
                                        Tensor dout, Tensor in, Tensor weight, Tensor mean,
                                        Tensor rstd) {
  const int64_t N = Rows(in);
  const int C = static_cast<int>(Cols(in));
  if (!din_sums.empty()) cpu::column_sums_accumulate(din_sums.as<float>(), din.as<float>(), N, C);
  cpu::layernorm_backward(din.as<float>(), dweight.as<float>(), dbias.as<float>(), dout.as<float>(),
                          in.as<float>(), weight.as<float>(), mean.as<float>(), rstd.as<float>(), N,
                          C);
  return Status::Ok();
}

}  // namespace trainer
