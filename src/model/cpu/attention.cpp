// Causal multi-head self-attention on the packed qkv layout (B,T,3*NH*HS) = [q | k | v], each
// NH heads of HS columns: forward and backward kernels and the CpuBackend Attention* ops. Work is
// split over (batch, head) pairs; each pair is done by one thread in a fixed order (so the key
// and value gradients need no atomics), a block of kQueryBlock query rows at a time, with the
// products done by gemm over the keys up to the block's last row (the causal mask skips the
// rest). The backward pass recomputes the probabilities from the saved logsumexp statistics
// instead of keeping a (B,NH,T,T) buffer. Per-thread scratch: two (kQueryBlock, T) blocks and the
// transposed keys (and values) of the head.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/log.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/op_checks.h"
#include "model/cpu/simd.h"

namespace trainer {
namespace cpu {
namespace {

constexpr int kQueryBlock = 64;

inline float dot(const float* a, const float* b, int n) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// One (batch, head): pointers to its first q, k, v row (row stride 3C) and its output/gradient
// rows (row stride C).
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  int64_t C;  // NH*HS
  int64_t C3;
};

inline HeadView Head(const float* qkv, int b, int h, int T, int NH, int HS) {
  const int64_t C = static_cast<int64_t>(NH) * HS, C3 = 3 * C;
  const float* q = qkv + static_cast<int64_t>(b) * T * C3 + static_cast<int64_t>(h) * HS;
  return HeadView{q, q + C, q + 2 * C, C, C3};
}

// xt (HS, T) = x (T, HS) (row stride C3) transposed, so that gemm reads its rows contiguously.
inline void Transpose(float* xt, const float* x, int64_t C3, int T, int HS) {
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < HS; ++i) xt[static_cast<int64_t>(i) * T + t] = x[t * C3 + i];
}

// scores (rows, keys) (row stride T) = q[t0 : t0+rows] k[0 : keys]^T, with kt = k^T (HS, T).
inline void Scores(float* scores, const HeadView& hv, const float* kt, int t0, int rows, int keys,
                   int T, int HS) {
  gemm(scores, T, hv.q + t0 * hv.C3, hv.C3, 1, kt, T, 1, rows, keys, HS, false);
}

// Causal softmax of one row of raw scores p[0..len) (len = t + 1) in place, zeros in
// p[len..keys); returns the logsumexp of the scaled scores.
TRAINER_CPU_CLONES
float SoftmaxRow(float* p, int len, int keys, float scale) {
  float row_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : row_max)
  for (int s = 0; s < len; ++s) {
    p[s] *= scale;
    row_max = std::max(row_max, p[s]);
  }
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int s = 0; s < len; ++s) {
    p[s] = SimdExp(p[s] - row_max);
    sum += p[s];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
#pragma omp simd
  for (int s = 0; s < len; ++s) p[s] *= inv_sum;
  for (int s = len; s < keys; ++s) p[s] = 0.f;
  return row_max + static_cast<float>(std::log(sum));
}

// One row of the softmax backward: p[s] = exp(scale * scores[s] - lse) (in place over the
// scores) and ds[s] = scale * p[s] * (dp[s] - d) (in place over dp), zeros in [len, keys).
TRAINER_CPU_CLONES
void SoftmaxBackwardRow(float* p, float* ds, int len, int keys, float scale, float lse, float d) {
#pragma omp simd
  for (int s = 0; s < len; ++s) {
    p[s] = SimdExp(p[s] * scale - lse);
    ds[s] = scale * p[s] * (ds[s] - d);
  }
  for (int s = len; s < keys; ++s) p[s] = ds[s] = 0.f;
}

// Per thread: two (kQueryBlock, T) blocks and two (HS, T) transposes.
inline size_t ScratchPerThread(int T, int HS) {
  return (2 * static_cast<size_t>(kQueryBlock) + 2 * static_cast<size_t>(HS)) * T;
}

}  // namespace

size_t attention_scratch_floats(int T, int HS, int threads) {
  return ScratchPerThread(T, HS) * static_cast<size_t>(threads > 0 ? threads : 1);
}

void attention_forward(float* out, float* stats, const float* qkv, float* scratch, int B, int T,
                       int NH, int HS) {
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const HeadView hv = Head(qkv, b, h, T, NH, HS);
      // p (kQueryBlock, T): scores, then probabilities (zero above the diagonal); kt (HS, T).
      float* p = scratch + ScratchPerThread(T, HS) * omp_get_thread_num();
      float* kt = p + 2 * static_cast<int64_t>(kQueryBlock) * T;
      Transpose(kt, hv.k, hv.C3, T, HS);
      float* row_stats = stats + (static_cast<int64_t>(b) * NH + h) * T;
      for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, T - t0), keys = t0 + rows;
        Scores(p, hv, kt, t0, rows, keys, T, HS);
        for (int r = 0; r < rows; ++r)
          row_stats[t0 + r] = SoftmaxRow(p + static_cast<int64_t>(r) * T, t0 + r + 1, keys, scale);
        // out rows (rows, HS) = p (rows, keys) @ v[0 : keys].
        float* o = out + (static_cast<int64_t>(b) * T + t0) * hv.C + static_cast<int64_t>(h) * HS;
        gemm(o, hv.C, p, T, 1, hv.v, hv.C3, 1, rows, HS, keys, false);
      }
    }
  }
}

// With p_ts = exp(scale * q_t.k_s - stats_t), dp_ts = dout_t . v_s and
// D_t = sum_s p_ts dp_ts = dout_t . out_t: ds_ts = scale * p_ts (dp_ts - D_t);
// dq_t = sum_s ds_ts k_s; dk_s = sum_t ds_ts q_t; dv_s = sum_t p_ts dout_t.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* stats, float* scratch, int B, int T, int NH, int HS) {
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const HeadView hv = Head(qkv, b, h, T, NH, HS);
      const int64_t head_offset = hv.q - qkv;
      float* dq = dqkv + head_offset;
      float* dk = dq + hv.C;
      float* dv = dq + 2 * hv.C;
      for (int t = 0; t < T; ++t) {
        std::fill(dk + t * hv.C3, dk + t * hv.C3 + HS, 0.f);
        std::fill(dv + t * hv.C3, dv + t * hv.C3 + HS, 0.f);
      }
      float* p = scratch + ScratchPerThread(T, HS) * omp_get_thread_num();  // (kQB, T)
      float* ds = p + static_cast<int64_t>(kQueryBlock) * T;                // (kQB, T)
      float* kt = ds + static_cast<int64_t>(kQueryBlock) * T;               // (HS, T)
      float* vt = kt + static_cast<int64_t>(HS) * T;                        // (HS, T)
      Transpose(kt, hv.k, hv.C3, T, HS);
      Transpose(vt, hv.v, hv.C3, T, HS);
      const float* row_stats = stats + (static_cast<int64_t>(b) * NH + h) * T;
      const int64_t row0 = static_cast<int64_t>(b) * T * hv.C + static_cast<int64_t>(h) * HS;
      for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, T - t0), keys = t0 + rows;
        const float* g = dout + row0 + t0 * hv.C;  // (rows, HS), row stride C
        Scores(p, hv, kt, t0, rows, keys, T, HS);
        // ds (rows, keys) = dout rows @ v[0 : keys]^T, then the softmax backward in place.
        gemm(ds, T, g, hv.C, 1, vt, T, 1, rows, keys, HS, false);
        for (int r = 0; r < rows; ++r) {
          const int t = t0 + r;
          const float d = dot(g + r * hv.C, out + row0 + static_cast<int64_t>(t) * hv.C, HS);
          SoftmaxBackwardRow(p + static_cast<int64_t>(r) * T, ds + static_cast<int64_t>(r) * T,
                             t + 1, keys, scale, row_stats[t], d);
        }
        // dq rows = ds @ k[0 : keys]; dk[0 : keys] += ds^T @ q rows; dv[0 : keys] += p^T @ dout.
        gemm(dq + t0 * hv.C3, hv.C3, ds, T, 1, hv.k, hv.C3, 1, rows, HS, keys, false);
        gemm(dk, hv.C3, ds, 1, T, hv.q + t0 * hv.C3, hv.C3, 1, keys, HS, rows, true);
        gemm(dv, hv.C3, p, 1, T, g, hv.C, 1, keys, HS, rows, true);
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

Status CpuBackend::AttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                                    int num_kv_heads) {
  if (num_kv_heads != 0 && num_kv_heads != num_heads)
    return cpu::OpError("AttentionForward", "grouped-query attention is not implemented yet");
  TRAINER_RETURN_IF_ERROR(
      CheckAttentionShapes("AttentionForward", qkv, "out", out, stats, num_heads));
  const int T = static_cast<int>(qkv.dim(1)), HS = static_cast<int>(qkv.dim(2) / 3 / num_heads);
  cpu::attention_forward(out.as<float>(), stats.as<float>(), qkv.as<float>(),
                         AttentionScratch(T, HS), static_cast<int>(qkv.dim(0)), T, num_heads, HS);
  return Status::Ok();
}

Status CpuBackend::AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                                     int num_heads, int num_kv_heads) {
  if (num_kv_heads != 0 && num_kv_heads != num_heads)
    return cpu::OpError("AttentionBackward", "grouped-query attention is not implemented yet");
  const char* op = "AttentionBackward";
  TRAINER_RETURN_IF_ERROR(CheckAttentionShapes(op, qkv, "dout", dout, stats, num_heads));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "out", out, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSameShape(op, "out", out, "dout", dout));
  TRAINER_RETURN_IF_ERROR(cpu::CheckTensor(op, "dqkv", dqkv, DType::kF32));
  TRAINER_RETURN_IF_ERROR(cpu::CheckSameShape(op, "dqkv", dqkv, "qkv", qkv));
  const int T = static_cast<int>(qkv.dim(1)), HS = static_cast<int>(qkv.dim(2) / 3 / num_heads);
  cpu::attention_backward(dqkv.as<float>(), dout.as<float>(), qkv.as<float>(), out.as<float>(),
                          stats.as<float>(), AttentionScratch(T, HS), static_cast<int>(qkv.dim(0)),
                          T, num_heads, HS);
  return Status::Ok();
}

}  // namespace trainer
