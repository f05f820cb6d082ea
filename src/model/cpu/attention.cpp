// Causal multi-head self-attention on the packed qkv layout (B,T,3*NH*HS) = [q | k | v], each
// NH heads of HS columns: forward and backward kernels and the CpuBackend Attention* ops. Work is
// split over (batch, head) pairs; each pair is done by one thread in a fixed order, so the
// key/value gradients need no atomics. The backward pass recomputes the probabilities from the
// saved logsumexp statistics instead of keeping a (B,NH,T,T) buffer.
#include <omp.h>

#include <cmath>
#include <limits>

#include "common/log.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/op_checks.h"

namespace trainer {
namespace cpu {
namespace {

inline float dot(const float* a, const float* b, int n) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline void axpy(float* y, float alpha, const float* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

size_t attention_scratch_floats(int T, int threads) {
  return static_cast<size_t>(T) * static_cast<size_t>(threads > 0 ? threads : 1);
}

void attention_forward(float* out, float* stats, const float* qkv, float* scratch, int B, int T,
                       int NH, int HS) {
  const int64_t C = static_cast<int64_t>(NH) * HS, C3 = 3 * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      float* p = scratch + static_cast<size_t>(omp_get_thread_num()) * T;  // (T) this row's probs
      const float* base = qkv + static_cast<int64_t>(b) * T * C3 + h * HS;
      for (int t = 0; t < T; ++t) {
        const float* q = base + t * C3;
        float row_max = -std::numeric_limits<float>::infinity();
        for (int s = 0; s <= t; ++s) {
          p[s] = dot(q, base + s * C3 + C, HS) * scale;
          row_max = p[s] > row_max ? p[s] : row_max;
        }
        double sum = 0.0;
        for (int s = 0; s <= t; ++s) {
          p[s] = std::exp(p[s] - row_max);
          sum += p[s];
        }
        float* o = out + (static_cast<int64_t>(b) * T + t) * C + h * HS;  // (HS)
        for (int i = 0; i < HS; ++i) o[i] = 0.f;
        for (int s = 0; s <= t; ++s) axpy(o, p[s], base + s * C3 + 2 * C, HS);
        const float inv_sum = static_cast<float>(1.0 / sum);
        for (int i = 0; i < HS; ++i) o[i] *= inv_sum;
        stats[(static_cast<int64_t>(b) * NH + h) * T + t] =
            row_max + static_cast<float>(std::log(sum));
      }
    }
  }
}

// With p_ts = exp(scale * q_t.k_s - stats_t) and D_t = dout_t . out_t = sum_s p_ts (dout_t . v_s):
// dv_s += p_ts dout_t; ds_ts = p_ts (dout_t . v_s - D_t); dq_t += scale ds_ts k_s;
// dk_s += scale ds_ts q_t.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* stats, int B, int T, int NH, int HS) {
  const int64_t C = static_cast<int64_t>(NH) * HS, C3 = 3 * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int64_t offset = static_cast<int64_t>(b) * T * C3 + h * HS;
      const float* base = qkv + offset;
      float* dbase = dqkv + offset;
      for (int t = 0; t < T; ++t)
        for (int part = 0; part < 3; ++part)
          for (int i = 0; i < HS; ++i) dbase[t * C3 + part * C + i] = 0.f;
      const float* row_stats = stats + (static_cast<int64_t>(b) * NH + h) * T;
      for (int t = 0; t < T; ++t) {
        const int64_t row = (static_cast<int64_t>(b) * T + t) * C + h * HS;
        const float* q = base + t * C3;
        const float* g = dout + row;  // (HS)
        const float d = dot(g, out + row, HS);
        float* dq = dbase + t * C3;
        for (int s = 0; s <= t; ++s) {
          const float* k = base + s * C3 + C;
          const float* v = base + s * C3 + 2 * C;
          const float p = std::exp(dot(q, k, HS) * scale - row_stats[t]);
          const float ds = p * (dot(g, v, HS) - d) * scale;
          axpy(dbase + s * C3 + 2 * C, p, g, HS);
          axpy(dq, ds, k, HS);
          axpy(dbase + s * C3 + C, ds, q, HS);
        }
      }
    }
  }
}

}  // namespace cpu

namespace {

// qkv (B,T,3*NH*HS) against x (B,T,NH*HS) (out or dout) and stats (B,NH,T).
Status CheckAttentionShapes(const char* op, const Tensor& qkv, const char* x_name, const Tensor& x,
                            const Tensor& stats, int num_heads) {
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "qkv", qkv, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, x_name, x, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "stats", stats, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSize(op, "qkv", qkv, "dimensions", qkv.ndim, 3));
  const int64_t C = qkv.dim(2) / 3;
  if (num_heads <= 0 || qkv.dim(2) % 3 != 0 || C % num_heads != 0)
    return cpu::OpError(op, StrFormat("qkv %s does not split into 3 x %d heads",
                                      qkv.shape_string().c_str(), num_heads));
  TRAINER_RETURN_IF_ERROR(cpu::CheckAgree(op, x_name, x, "qkv", qkv, "C", cpu::Cols(x), C));
  TRAINER_RETURN_IF_ERROR(
      cpu::CheckAgree(op, x_name, x, "qkv", qkv, "B*T", cpu::Rows(x), cpu::Rows(qkv)));
  return cpu::CheckSize(op, "stats", stats, "elements (B*NH*T)", stats.numel(),
                        qkv.dim(0) * num_heads * qkv.dim(1));
}

}  // namespace

Status CpuBackend::AttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads) {
  TRAINER_RETURN_IF_ERROR(
      CheckAttentionShapes("AttentionForward", qkv, "out", out, stats, num_heads));
  const int T = static_cast<int>(qkv.dim(1));
  cpu::attention_forward(out.as<float>(), stats.as<float>(), qkv.as<float>(), AttentionScratch(T),
                         static_cast<int>(qkv.dim(0)), T, num_heads,
                         static_cast<int>(qkv.dim(2) / 3 / num_heads));
  return Status::Ok();
}

Status CpuBackend::AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                                     int num_heads) {
  const char* op = "AttentionBackward";
  TRAINER_RETURN_IF_ERROR(CheckAttentionShapes(op, qkv, "dout", dout, stats, num_heads));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "out", out, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSameShape(op, "out", out, "dout", dout));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "dqkv", dqkv, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSameShape(op, "dqkv", dqkv, "qkv", qkv));
  cpu::attention_backward(dqkv.as<float>(), dout.as<float>(), qkv.as<float>(), out.as<float>(),
                          stats.as<float>(), static_cast<int>(qkv.dim(0)),
                          static_cast<int>(qkv.dim(1)), num_heads,
                          static_cast<int>(qkv.dim(2) / 3 / num_heads));
  return Status::Ok();
}

}  // namespace trainer
