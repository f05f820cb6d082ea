// Causal self-attention on the packed qkv layout (B,T,(NH+2*NKV)*HS) = [q | k | v]: NH query
// heads and NKV key/value heads of HS columns, query head h reading kv head h / (NH/NKV)
// (grouped-query attention; NKV = NH is multi-head attention). Forward and backward kernels and
// the CpuBackend Attention* ops. The forward splits the work over (batch, query head) pairs, the
// backward over (batch, kv head) pairs, whose query heads one thread does in order, so that the
// key and value gradients sum over the group in a fixed order without atomics. Each head is done
// a block of kQueryBlock query rows at a time, with the products done by gemm over the keys up to
// the block's last row (the causal mask skips the rest). The backward pass recomputes the
// probabilities from the saved logsumexp statistics instead of keeping a (B,NH,T,T) buffer.
// Per-thread scratch: two (kQueryBlock, T) blocks and the transposed keys (and values) of the
// head. Under Data.packing: documents (doc_starts) a query row sees only the keys of its own
// document, [doc_starts[t], t]: the scores before that start are zeroed like those past t.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/log.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
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

// One (batch, query head h): pointers to the first row of its q head and of its kv head's k and
// v (row stride W); its output/gradient rows have row stride C.
struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  int64_t C;  // NH*HS
  int64_t W;  // (NH+2*NKV)*HS
};

inline HeadView Head(const float* qkv, int b, int h, int T, int NH, int NKV, int HS) {
  const int64_t C = static_cast<int64_t>(NH) * HS, W = static_cast<int64_t>(NH + 2 * NKV) * HS;
  const int64_t kv = h / (NH / NKV);
  const float* row = qkv + static_cast<int64_t>(b) * T * W;
  const float* k = row + C + kv * HS;
  return HeadView{row + static_cast<int64_t>(h) * HS, k, k + static_cast<int64_t>(NKV) * HS, C, W};
}

// xt (HS, T) = x (T, HS) (row stride W) transposed, so that gemm reads its rows contiguously.
inline void Transpose(float* xt, const float* x, int64_t W, int T, int HS) {
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < HS; ++i) xt[static_cast<int64_t>(i) * T + t] = x[t * W + i];
}

// scores (rows, keys) (row stride T) = q[t0 : t0+rows] k[0 : keys]^T, with kt = k^T (HS, T).
inline void Scores(float* scores, const HeadView& hv, const float* kt, int t0, int rows, int keys,
                   int T, int HS) {
  gemm(scores, T, hv.q + t0 * hv.W, hv.W, 1, kt, T, 1, rows, keys, HS, false);
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

// The first key that query t of sample b sees: its document's start, or 0.
inline int FirstKey(const int32_t* doc_starts, int b, int t, int T) {
  return doc_starts == nullptr ? 0 : doc_starts[static_cast<int64_t>(b) * T + t];
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
                       int NH, int NKV, int HS, const DropoutKey& dropout,
                       const int32_t* doc_starts) {
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const HeadView hv = Head(qkv, b, h, T, NH, NKV, HS);
      // p (kQueryBlock, T): scores, then probabilities (zero above the diagonal); kt (HS, T).
      float* p = scratch + ScratchPerThread(T, HS) * omp_get_thread_num();
      float* kt = p + 2 * static_cast<int64_t>(kQueryBlock) * T;
      Transpose(kt, hv.k, hv.W, T, HS);
      float* row_stats = stats + (static_cast<int64_t>(b) * NH + h) * T;
      for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
        const int rows = std::min(kQueryBlock, T - t0), keys = t0 + rows;
        Scores(p, hv, kt, t0, rows, keys, T, HS);
        for (int r = 0; r < rows; ++r) {
          float* row = p + static_cast<int64_t>(r) * T;
          const int lo = FirstKey(doc_starts, b, t0 + r, T);
          std::fill(row, row + lo, 0.f);
          row_stats[t0 + r] = SoftmaxRow(row + lo, t0 + r + 1 - lo, keys - lo, scale);
          if (dropout.on())
            dropout_row(row, t0 + r + 1, dropout, dropout.first_sample + b, t0 + r,
                        dropout.first_head + h);
        }
        // out rows (rows, HS) = p (rows, keys) @ v[0 : keys].
        float* o = out + (static_cast<int64_t>(b) * T + t0) * hv.C + static_cast<int64_t>(h) * HS;
        gemm(o, hv.C, p, T, 1, hv.v, hv.W, 1, rows, HS, keys, false);
      }
    }
  }
}

// With p_ts = exp(scale * q_t.k_s - stats_t), dp_ts = dout_t . v_s and
// D_t = sum_s p_ts dp_ts = dout_t . out_t: ds_ts = scale * p_ts (dp_ts - D_t);
// dq_t = sum_s ds_ts k_s; dk_s = sum_t ds_ts q_t; dv_s = sum_t p_ts dout_t, the last two summed
// also over the query heads of the kv head's group, in head order. With dropout (mask z, scale
// 1/(1-p)), out_t = sum_s z_ts p_ts v_s / (1-p): dp_ts is dout_t . v_s dropped by the same mask,
// D_t = dout_t . out_t still, and dv_s sums the dropped probabilities.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* stats, float* scratch, int B, int T, int NH, int NKV, int HS,
                        const DropoutKey& dropout, const int32_t* doc_starts) {
  const float scale = 1.f / std::sqrt(static_cast<float>(HS));
  const int group = NH / NKV;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int kv = 0; kv < NKV; ++kv) {
      const HeadView first = Head(qkv, b, kv * group, T, NH, NKV, HS);
      float* dk = dqkv + (first.k - qkv);  // (T, HS), row stride W
      float* dv = dqkv + (first.v - qkv);
      for (int t = 0; t < T; ++t) {
        std::fill(dk + t * first.W, dk + t * first.W + HS, 0.f);
        std::fill(dv + t * first.W, dv + t * first.W + HS, 0.f);
      }
      float* p = scratch + ScratchPerThread(T, HS) * omp_get_thread_num();  // (kQB, T)
      float* ds = p + static_cast<int64_t>(kQueryBlock) * T;                // (kQB, T)
      float* kt = ds + static_cast<int64_t>(kQueryBlock) * T;               // (HS, T)
      float* vt = kt + static_cast<int64_t>(HS) * T;                        // (HS, T)
      Transpose(kt, first.k, first.W, T, HS);
      Transpose(vt, first.v, first.W, T, HS);
      for (int h = kv * group; h < (kv + 1) * group; ++h) {
        const HeadView hv = Head(qkv, b, h, T, NH, NKV, HS);
        float* dq = dqkv + (hv.q - qkv);
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
            float* p_row = p + static_cast<int64_t>(r) * T;
            float* ds_row = ds + static_cast<int64_t>(r) * T;
            const int64_t sample = dropout.first_sample + b;
            const int head = dropout.first_head + h;
            if (dropout.on()) dropout_row(ds_row, t + 1, dropout, sample, t, head);
            const int lo = FirstKey(doc_starts, b, t, T);
            std::fill(p_row, p_row + lo, 0.f);
            std::fill(ds_row, ds_row + lo, 0.f);
            SoftmaxBackwardRow(p_row + lo, ds_row + lo, t + 1 - lo, keys - lo, scale, row_stats[t],
                               d);
            if (dropout.on()) dropout_row(p_row, t + 1, dropout, sample, t, head);
          }
          // dq rows = ds @ k[0 : keys]; dk[0 : keys] += ds^T @ q rows; dv[0 : keys] += p^T @ dout.
          gemm(dq + t0 * hv.W, hv.W, ds, T, 1, hv.k, hv.W, 1, rows, HS, keys, false);
          gemm(dk, hv.W, ds, 1, T, hv.q + t0 * hv.W, hv.W, 1, keys, HS, rows, true);
          gemm(dv, hv.W, p, 1, T, g, hv.C, 1, keys, HS, rows, true);
        }
      }
    }
  }
}

}  // namespace cpu

namespace {
// The head size of qkv (B,T,(NH+2*NKV)*HS) (its split was checked by the op's contract).
int HeadSize(const Tensor& qkv, int num_heads, int num_kv_heads) {
  return static_cast<int>(qkv.dim(2) / (static_cast<int64_t>(num_heads) + 2 * num_kv_heads));
}

// The documents' starts (B,T) of Data.packing: documents, or null.
const int32_t* DocStarts(const Tensor& doc_starts) {
  return doc_starts.empty() ? nullptr : doc_starts.as<int32_t>();
}
}  // namespace

Status CpuBackend::RunAttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                                       int num_kv_heads, const DropoutKey& dropout,
                                       Tensor doc_starts, const DocumentShape&) {
  const int NKV = num_kv_heads, HS = HeadSize(qkv, num_heads, num_kv_heads);
  const int T = static_cast<int>(qkv.dim(1));
  cpu::attention_forward(out.as<float>(), stats.as<float>(), qkv.as<float>(),
                         AttentionScratch(T, HS), static_cast<int>(qkv.dim(0)), T, num_heads, NKV,
                         HS, dropout, DocStarts(doc_starts));
  return Status::Ok();
}

Status CpuBackend::RunAttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                        Tensor stats, int num_heads, int num_kv_heads,
                                        const DropoutKey& dropout, Tensor doc_starts,
                                        const DocumentShape&) {
  const int NKV = num_kv_heads, HS = HeadSize(qkv, num_heads, num_kv_heads);
  const int T = static_cast<int>(qkv.dim(1));
  cpu::attention_backward(dqkv.as<float>(), dout.as<float>(), qkv.as<float>(), out.as<float>(),
                          stats.as<float>(), AttentionScratch(T, HS), static_cast<int>(qkv.dim(0)),
                          T, num_heads, NKV, HS, dropout, DocStarts(doc_starts));
  return Status::Ok();
}

}  // namespace trainer
