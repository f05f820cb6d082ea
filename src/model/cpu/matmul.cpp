// Matrix products: the packed, register-tiled gemm kernel under every matmul, the
// matmul_forward/matmul_backward kernels (bias, fused GELU, bias gradient) and the CpuBackend
// MatmulForward/MatmulBackward ops.
//
// gemm splits out (M,N) into kBlockRows x kBlockCols tasks (OpenMP static schedule). A task walks
// K in chunks of kBlockK: it packs its rows of A (zero-padded to whole register tiles), then for
// each kTileCols-wide panel packs B (zero-padded) and runs the kTileRows x kTileCols register
// tile over the chunk. The sum for each element runs in increasing k from its initial value
// whatever the blocking, so results do not depend on the number of threads. The task function is
// compiled for AVX-512, AVX2+FMA and baseline x86-64, picked at load time (simd.h).
#include <omp.h>

#include <algorithm>

#include "common/log.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/simd.h"

namespace trainer {
namespace cpu {
namespace {

constexpr int kTileRows = 8;     // rows of the register tile
constexpr int kTileCols = 32;    // columns of the register tile (two 16-float vectors)
constexpr int kBlockK = 256;     // k-chunk: a packed B panel (kBlockK x kTileCols) stays in L1
constexpr int kBlockRows = 64;   // rows of out per task (a multiple of kTileRows)
constexpr int kBlockCols = 256;  // columns of out per task (a multiple of kTileCols)

struct GemmArgs {
  float* out;
  int64_t ldo;
  const float* a;
  int64_t a_rs, a_cs;
  const float* b;
  int64_t b_rs, b_cs;
  int64_t K;
  bool accumulate;
};

// One task: out[m0:m1, n0:n1] over all of K.
TRAINER_CPU_CLONES
void gemm_block(const GemmArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  // A packed as [row tile][k][kTileRows]; B panel as [k][kTileCols].
  alignas(64) float a_pack[kBlockRows * kBlockK];
  alignas(64) float b_pack[kBlockK * kTileCols];
  const int64_t row_tiles = (m1 - m0 + kTileRows - 1) / kTileRows;
  for (int64_t k0 = 0; k0 < g.K; k0 += kBlockK) {
    const int64_t kc = std::min<int64_t>(kBlockK, g.K - k0);
    const bool load = g.accumulate || k0 > 0;
    for (int64_t t = 0; t < row_tiles; ++t) {
      float* ap = a_pack + t * kc * kTileRows;
      for (int r = 0; r < kTileRows; ++r) {
        const int64_t row = m0 + t * kTileRows + r;
        if (row < m1) {
          const float* src = g.a + row * g.a_rs + k0 * g.a_cs;
          for (int64_t k = 0; k < kc; ++k) ap[k * kTileRows + r] = src[k * g.a_cs];
        } else {
          for (int64_t k = 0; k < kc; ++k) ap[k * kTileRows + r] = 0.f;
        }
      }
    }
    for (int64_t n = n0; n < n1; n += kTileCols) {
      const int cols = static_cast<int>(std::min<int64_t>(kTileCols, n1 - n));
      if (g.b_rs == 1) {
        // B's columns are contiguous along k (B = weight^T): read them along k.
        for (int j = 0; j < cols; ++j) {
          const float* src = g.b + k0 + (n + j) * g.b_cs;
          for (int64_t k = 0; k < kc; ++k) b_pack[k * kTileCols + j] = src[k];
        }
        for (int j = cols; j < kTileCols; ++j)
          for (int64_t k = 0; k < kc; ++k) b_pack[k * kTileCols + j] = 0.f;
      } else {
        for (int64_t k = 0; k < kc; ++k) {
          const float* src = g.b + (k0 + k) * g.b_rs + n * g.b_cs;
          float* dst = b_pack + k * kTileCols;
          if (g.b_cs == 1 && cols == kTileCols) {
#pragma omp simd
            for (int j = 0; j < kTileCols; ++j) dst[j] = src[j];
          } else {
            for (int j = 0; j < kTileCols; ++j) dst[j] = j < cols ? src[j * g.b_cs] : 0.f;
          }
        }
      }
      for (int64_t t = 0; t < row_tiles; ++t) {
        const int64_t m = m0 + t * kTileRows;
        const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m1 - m));
        const bool full = rows == kTileRows && cols == kTileCols;
        float acc[kTileRows][kTileCols];
        for (int r = 0; r < kTileRows; ++r) {
          const float* o = g.out + (m + r) * g.ldo + n;
          if (full && load) {
#pragma omp simd
            for (int j = 0; j < kTileCols; ++j) acc[r][j] = o[j];
          } else {
            for (int j = 0; j < kTileCols; ++j)
              acc[r][j] = (load && r < rows && j < cols) ? o[j] : 0.f;
          }
        }
        const float* ap = a_pack + t * kc * kTileRows;
        for (int64_t k = 0; k < kc; ++k) {
          const float* bp = b_pack + k * kTileCols;
#pragma GCC unroll 8
          for (int r = 0; r < kTileRows; ++r) {
            const float av = ap[k * kTileRows + r];
#pragma omp simd
            for (int j = 0; j < kTileCols; ++j) acc[r][j] += av * bp[j];
          }
        }
        for (int r = 0; r < rows; ++r) {
          float* o = g.out + (m + r) * g.ldo + n;
          if (full) {
#pragma omp simd
            for (int j = 0; j < kTileCols; ++j) o[j] = acc[r][j];
          } else {
            for (int j = 0; j < cols; ++j) o[j] = acc[r][j];
          }
        }
      }
    }
  }
}

}  // namespace

void gemm(float* out, int64_t ldo, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
          int64_t b_rs, int64_t b_cs, int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(out + i * ldo, out + i * ldo + N, 0.f);
    return;
  }
  const GemmArgs args{out, ldo, a, a_rs, a_cs, b, b_rs, b_cs, K, accumulate};
  const int64_t row_blocks = (M + kBlockRows - 1) / kBlockRows;
  const int64_t col_blocks = (N + kBlockCols - 1) / kBlockCols;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t task = 0; task < row_blocks * col_blocks; ++task) {
    const int64_t m0 = task / col_blocks * kBlockRows, n0 = task % col_blocks * kBlockCols;
    gemm_block(args, m0, std::min(M, m0 + kBlockRows), n0, std::min(N, n0 + kBlockCols));
  }
}

void transpose(float* out, const float* in, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

void matmul_forward(float* out, float* pre_act, const float* in, const float* weight,
                    const float* bias, int64_t N, int C, int OC, bool gelu) {
  float* linear = gelu ? pre_act : out;  // (N,OC)
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::copy(bias, bias + OC, linear + n * OC);
  }
  // A = in (N,C); B(c, o) = weight[o*C + c].
  gemm(linear, OC, in, C, 1, weight, 1, C, N, OC, C, bias != nullptr);
  if (gelu) gelu_forward(out, pre_act, static_cast<size_t>(N) * OC);
}

void column_sums_accumulate(float* sums, const float* x, int64_t N, int C, int64_t ld,
                            const float* weights) {
  constexpr int kColumnChunk = 64;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += kColumnChunk) {
    const int c1 = std::min(C, c0 + kColumnChunk);
    for (int64_t n = 0; n < N; ++n) {
      const float* row = x + n * ld;
      const float w = weights ? weights[n] : 1.f;
#pragma omp simd
      for (int c = c0; c < c1; ++c) sums[c] += w * row[c];
    }
  }
}

void column_sums_accumulate(float* sums, const float* x, int64_t N, int C) {
  column_sums_accumulate(sums, x, N, C, C, nullptr);
}

void matmul_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                     const float* weight, int64_t N, int C, int OC) {
  // din (N,C) = dout (N,OC) @ weight (OC,C).
  if (din != nullptr) gemm(din, C, dout, OC, 1, weight, C, 1, N, C, OC, false);
  // dweight (OC,C) += dout^T @ in: A(o, n) = dout[n*OC + o].
  if (dweight != nullptr) gemm(dweight, C, dout, 1, OC, in, C, 1, OC, C, N, true);
  if (dbias != nullptr) column_sums_accumulate(dbias, dout, N, OC);
}

}  // namespace cpu

Status CpuBackend::RunMatmulForward(Tensor out, Tensor pre_act, Tensor in, Tensor weight,
                                    Tensor bias, Activation act) {
  const int64_t N = Rows(in), C = Cols(in), OC = weight.dim(0);
  const bool gelu = act == Activation::kGelu;
  cpu::matmul_forward(out.as<float>(), gelu ? pre_act.as<float>() : nullptr, in.as<float>(),
                      weight.as<float>(), bias.empty() ? nullptr : bias.as<float>(), N,
                      static_cast<int>(C), static_cast<int>(OC), gelu);
  return Status::Ok();
}

Status CpuBackend::RunMatmulBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                                     Tensor in, Tensor weight, GradientWrite dweight_write) {
  const int64_t N = Rows(in), C = Cols(in), OC = weight.dim(0);
  // The reference kernel accumulates; over zero that is the overwritten value, bit for bit.
  if (!dweight.empty() && dweight_write == GradientWrite::kOverwrite)
    std::fill(dweight.as<float>(), dweight.as<float>() + dweight.numel(), 0.f);
  cpu::matmul_backward(
      din.empty() ? nullptr : din.as<float>(), dweight.empty() ? nullptr : dweight.as<float>(),
      dbias.empty() ? nullptr : dbias.as<float>(), dout.as<float>(), in.as<float>(),
      weight.as<float>(), N, static_cast<int>(C), static_cast<int>(OC));
  return Status::Ok();
}

namespace {

// block (rows, cols), rows ld apart, = (accumulate ? block : 0) + alpha * product (rows, cols).
void AddScaled(float* block, int64_t ld, const std::vector<float>& product, int64_t rows,
               int64_t cols, float alpha, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      block[i * ld + j] = (accumulate ? block[i * ld + j] : 0.f) + alpha * product[i * cols + j];
}

}  // namespace

// With alpha != 1 each product is made whole first and then scaled, as a GEMM and a scaling
// pass would.
Status CpuBackend::RunMatmulColumns(ColumnBlock out, GradientWrite out_write, ColumnBlock in,
                                    Tensor weight, Tensor bias, float alpha) {
  const int64_t N = in.rows(), R = in.cols, OC = out.cols, ldo = out.ld();
  float* o = out.whole.as<float>() + out.first;  // (N,OC), rows ldo apart
  bool accumulate = out_write == GradientWrite::kAccumulate;
  if (!bias.empty()) {  // the bias first, as matmul_forward starts from it
    const float* b = bias.as<float>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < OC; ++j) o[n * ldo + j] = (accumulate ? o[n * ldo + j] : 0.f) + b[j];
    accumulate = true;
  }
  // A = the in block (N,R), rows in.ld() apart; B(r, j) = weight[j*R + r].
  const float* a = in.whole.as<float>() + in.first;
  if (alpha == 1.f) {
    cpu::gemm(o, ldo, a, in.ld(), 1, weight.as<float>(), 1, R, N, OC, R, accumulate);
    return Status::Ok();
  }
  std::vector<float> product(static_cast<size_t>(N * OC));
  cpu::gemm(product.data(), OC, a, in.ld(), 1, weight.as<float>(), 1, R, N, OC, R, false);
  AddScaled(o, ldo, product, N, OC, alpha, accumulate);
  return Status::Ok();
}

Status CpuBackend::RunMatmulBackwardColumns(ColumnBlock din, GradientWrite din_write,
                                            Tensor dweight, ColumnBlock dout, ColumnBlock in,
                                            Tensor weight, float alpha) {
  const int64_t N = dout.rows(), C = in.cols, OC = dout.cols;
  const float* d = dout.whole.as<float>() + dout.first;  // (N,OC), rows dout.ld() apart
  const bool scaled = alpha != 1.f;
  std::vector<float> product;
  if (!din.whole.empty()) {  // din block (N,C) (+)= alpha dout block @ weight (OC,C)
    float* out = din.whole.as<float>() + din.first;
    const bool accumulate = din_write == GradientWrite::kAccumulate;
    if (scaled) product.resize(static_cast<size_t>(N * C));
    cpu::gemm(scaled ? product.data() : out, scaled ? C : din.ld(), d, dout.ld(), 1,
              weight.as<float>(), C, 1, N, C, OC, !scaled && accumulate);
    if (scaled) AddScaled(out, din.ld(), product, N, C, alpha, accumulate);
  }
  if (!dweight.empty()) {  // dweight (OC,C) += alpha dout block^T @ in block: A(o, n) = d[n*ld + o]
    if (scaled) product.resize(static_cast<size_t>(OC * C));
    cpu::gemm(scaled ? product.data() : dweight.as<float>(), C, d, 1, dout.ld(),
              in.whole.as<float>() + in.first, in.ld(), 1, OC, C, N, !scaled);
    if (scaled) AddScaled(dweight.as<float>(), C, product, OC, C, alpha, true);
  }
  return Status::Ok();
}

Status CpuBackend::RunColumnSums(Tensor out, Tensor in, int64_t first_column, Tensor row_weights) {
  const int64_t N = Rows(in), C = Cols(in), W = out.numel();
  cpu::column_sums_accumulate(out.as<float>(), in.as<float>() + first_column, N,
                              static_cast<int>(W), C,
                              row_weights.empty() ? nullptr : row_weights.as<float>());
  return Status::Ok();
}

}  // namespace trainer
