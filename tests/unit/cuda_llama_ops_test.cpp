// GPU tests of the CUDA backend's Llama-family ops against the CPU fp32 backend, on a bf16 and an
// f32 CudaBackend: RMSNorm (plain and fused with the residual add) forward and backward, Qwen3's
// q/k norm, RoPE forward and backward, SwiGLU forward and backward, and grouped-query attention
// through cuDNN and through our fallback kernels (the MoE ops: cuda_moe_test.cpp). Inputs are
// random values rounded to bf16, so that both backends see the same numbers. The weight
// gradients must be bitwise the same in two runs. Attention's reference is the CPU's multi-head
// attention over q and the kv heads repeated for their query groups, its kv gradients summed
// over each group.
#include <cmath>
#include <cstdio>

#include "cuda_test_util.h"

namespace trainer {
namespace cuda_testing {
namespace {

using Shape = std::vector<int64_t>;

// Relative L2 error bounds for one compute dtype: values rounded once to bf16 (out), activation
// gradients (din: more operations before the rounding), f32 parameter gradients and statistics.
struct Tolerance {
  double out, grad, weight_grad, stats;
};
Tolerance ToleranceFor(DType dtype) {
  return dtype == DType::kBF16 ? Tolerance{1e-2, 2e-2, 1e-4, 1e-5}
                               : Tolerance{1e-5, 2e-5, 2e-5, 1e-5};
}

// Columns [first, first + count) of every row of x (rows of `width`).
std::vector<float> Columns(const std::vector<float>& x, int64_t width, int64_t first,
                           int64_t count) {
  std::vector<float> out;
  for (size_t r = 0; r + width <= x.size(); r += width)
    out.insert(out.end(), x.begin() + r + first, x.begin() + r + first + count);
  return out;
}

class CudaLlamaOpsTest : public CudaVsCpuTest {
 protected:
  // Runs check(gpu, tolerance) on the bf16 backend and on an f32 one.
  template <typename Check>
  void ForEachDtype(const Check& check) {
    std::unique_ptr<CudaBackend> gpu32;
    ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kF32, &gpu32));
    for (CudaBackend* gpu : {gpu_.get(), gpu32.get()}) {
      SCOPED_TRACE(Trace() + ", " + DTypeName(gpu->compute_dtype()));
      check(gpu, ToleranceFor(gpu->compute_dtype()));
    }
  }
  // A buffer of `dtype` on `gpu` holding `values`.
  std::unique_ptr<DeviceBuffer> On(CudaBackend* gpu, DType dtype, const std::vector<float>& values,
                                   Shape shape) {
    auto b = std::make_unique<DeviceBuffer>(gpu, dtype, std::move(shape));
    EXPECT_TRUE(b->status().ok()) << b->status().message();
    EXPECT_TRUE(b->Upload(values).ok());
    return b;
  }
};

// ---- RMSNorm ----
// bf16 (8 per 16 bytes): blocks of one warp with idle lanes (74 x 200), of 32 vectors' threads
// (50 x 1032: 129 vectors, 160 threads), full 256-thread blocks with one vector (3001 x 2048) or
// two (9 x 4096) per thread, a grid at its one-wave cap with a ragged last block (13001 x 896),
// the scalar path for an odd C (45 x 201) and for C not a multiple of 8 (5 x 4100), and a row over
// 48 KiB of f32 sums (3 x 16384: the shared-memory opt-in). In f32 the same C take other threads.
struct NormShape {
  int N, C;
};
constexpr NormShape kRmsNormShapes[] = {{74, 200},    {50, 1032}, {3001, 2048}, {9, 4096},
                                        {13001, 896}, {45, 201},  {5, 4100},    {3, 16384}};

TEST_F(CudaLlamaOpsTest, RmsNormForwardAndBackwardMatchCpu) {
  ForEachDtype([&](CudaBackend* gpu, const Tolerance& tol) {
    for (const NormShape& s : kRmsNormShapes) {
      const int N = s.N, C = s.C;
      SCOPED_TRACE(StrFormat("N=%d C=%d", N, C));
      const size_t NC = static_cast<size_t>(N) * C;
      const DType dt = gpu->compute_dtype(), f32 = DType::kF32;
      const float eps = 1e-6f;
      std::vector<float> in = Random(NC, -2.f, 3.f), weight = Random(C, 0.5f, 1.5f),
                         dout = Random(NC);
      const std::vector<float> din0 = Random(NC), dw0 = RandomFloats(C, rng_);
      std::vector<float> out(NC), rstd(N), din = din0, dw = dw0;
      ASSERT_STATUS_OK(cpu_->RmsNormForward(HostView(out, {N, C}), HostView(rstd, {N}),
                                            HostView(in, {N, C}), HostView(weight, {C}), eps));
      ASSERT_STATUS_OK(cpu_->RmsNormBackward(HostView(din, {N, C}), HostView(dw, {C}),
                                             HostView(dout, {N, C}), HostView(in, {N, C}),
                                             HostView(weight, {C}), HostView(rstd, {N})));

      auto g_in = On(gpu, dt, in, {N, C}), g_w = On(gpu, dt, weight, {C});
      auto g_out = On(gpu, dt, std::vector<float>(NC), {N, C});
      auto g_rstd = On(gpu, f32, std::vector<float>(N), {N});
      auto g_dout = On(gpu, dt, dout, {N, C}), g_din = On(gpu, dt, din0, {N, C});
      auto g_dw = On(gpu, f32, dw0, {C});
      auto forward = [&] {
        return gpu->RmsNormForward(g_out->tensor(), g_rstd->tensor(), g_in->tensor(), g_w->tensor(),
                                   eps);
      };
      ASSERT_STATUS_OK(forward());
      const std::vector<float> got_out = g_out->Download(), got_rstd = g_rstd->Download();
      EXPECT_RELATIVE_ERROR_BELOW(got_out, out, tol.out);
      EXPECT_RELATIVE_ERROR_BELOW(got_rstd, rstd, tol.stats);
      ASSERT_STATUS_OK(forward());
      EXPECT_BITWISE_EQUAL(g_out->Download(), got_out) << "out, two identical runs";
      EXPECT_BITWISE_EQUAL(g_rstd->Download(), got_rstd) << "rstd, two identical runs";
      // Backward from the GPU's own statistics (as in training).
      auto backward = [&] {
        return gpu->RmsNormBackward(g_din->tensor(), g_dw->tensor(), g_dout->tensor(),
                                    g_in->tensor(), g_w->tensor(), g_rstd->tensor());
      };
      ASSERT_STATUS_OK(backward());
      const std::vector<float> got_din = g_din->Download(), got_dw = g_dw->Download();
      EXPECT_RELATIVE_ERROR_BELOW(Minus(got_din, din0), Minus(din, din0), tol.grad);
      EXPECT_RELATIVE_ERROR_BELOW(Minus(got_dw, dw0), Minus(dw, dw0), tol.weight_grad);
      ASSERT_TRUE(g_din->Upload(din0).ok() && g_dw->Upload(dw0).ok());
      ASSERT_STATUS_OK(backward());
      EXPECT_BITWISE_EQUAL(g_din->Download(), got_din) << "din, two identical runs";
      EXPECT_BITWISE_EQUAL(g_dw->Download(), got_dw) << "dweight, two identical runs";
    }
  });
}

TEST_F(CudaLlamaOpsTest, AddRmsNormForwardMatchesAddThenRmsNormOnCpu) {
  ForEachDtype([&](CudaBackend* gpu, const Tolerance& tol) {
    for (const NormShape& s : kRmsNormShapes) {
      const int N = s.N, C = s.C;
      SCOPED_TRACE(StrFormat("N=%d C=%d", N, C));
      const size_t NC = static_cast<size_t>(N) * C;
      const DType dt = gpu->compute_dtype(), f32 = DType::kF32;
      const float eps = 1e-5f;
      std::vector<float> a = Random(NC), b = Random(NC), weight = Random(C, 0.5f, 1.5f);
      // The GPU rounds the residual to its dtype before normalising it: the reference does too.
      std::vector<float> residual(NC);
      for (size_t i = 0; i < NC; ++i) residual[i] = a[i] + b[i];
      residual = Rounded(residual, dt);
      std::vector<float> out(NC), rstd(N);
      ASSERT_STATUS_OK(cpu_->RmsNormForward(HostView(out, {N, C}), HostView(rstd, {N}),
                                            HostView(residual, {N, C}), HostView(weight, {C}),
                                            eps));
      for (bool alias_a : {true, false}) {  // residual written over a, or over b
        SCOPED_TRACE(alias_a ? "residual aliases a" : "residual aliases b");
        auto g_a = On(gpu, dt, a, {N, C}), g_b = On(gpu, dt, b, {N, C});
        auto g_w = On(gpu, dt, weight, {C});
        auto g_out = On(gpu, dt, std::vector<float>(NC), {N, C});
        auto g_rstd = On(gpu, f32, std::vector<float>(N), {N});
        DeviceBuffer* g_residual = alias_a ? g_a.get() : g_b.get();
        ASSERT_STATUS_OK(gpu->AddRmsNormForward(g_residual->tensor(), g_out->tensor(),
                                                g_rstd->tensor(), g_a->tensor(), g_b->tensor(),
                                                g_w->tensor(), eps));
        EXPECT_RELATIVE_ERROR_BELOW(g_residual->Download(), residual, 1e-6);
        EXPECT_RELATIVE_ERROR_BELOW(g_out->Download(), out, tol.out);
        EXPECT_RELATIVE_ERROR_BELOW(g_rstd->Download(), rstd, tol.stats);
      }
    }
  });
}

// ---- q/k norm and RoPE: qkv (B,T,(NH+2*NKV)*HD) ----
struct HeadsCase {
  int B, T, NH, NKV, HD;
  int64_t rows() const { return static_cast<int64_t>(B) * T; }
  int64_t width() const { return static_cast<int64_t>(NH + 2 * NKV) * HD; }
  size_t size() const { return static_cast<size_t>(rows() * width()); }
  std::string text() const { return StrFormat("B=%d T=%d NH=%d NKV=%d HD=%d", B, T, NH, NKV, HD); }
};
// Head sizes of both q/k-norm paths: contiguous lanes (32, 64, 128, and 256 in bf16) and strided
// ones (48; 256 in f32).
constexpr HeadsCase kQkNormCases[] = {
    {2, 37, 8, 2, 128}, {1, 45, 4, 4, 64}, {2, 9, 6, 3, 48}, {1, 20, 2, 1, 256}, {3, 11, 2, 2, 32}};

TEST_F(CudaLlamaOpsTest, QkNormForwardAndBackwardMatchCpu) {
  ForEachDtype([&](CudaBackend* gpu, const Tolerance& tol) {
    for (const HeadsCase& c : kQkNormCases) {
      SCOPED_TRACE(c.text());
      const int64_t B = c.B, T = c.T, W = c.width(), HD = c.HD, N = c.rows();
      const int64_t normed = c.NH + c.NKV;
      const DType dt = gpu->compute_dtype(), f32 = DType::kF32;
      const float eps = 1e-6f;
      std::vector<float> in = Random(c.size(), -2.f, 2.f), qw = Random(HD, 0.5f, 1.5f),
                         kw = Random(HD, 0.5f, 1.5f), dout = Random(c.size());
      const std::vector<float> dq0 = RandomFloats(HD, rng_), dk0 = RandomFloats(HD, rng_);
      std::vector<float> out(c.size()), rstd(N * normed), din(c.size()), dq = dq0, dk = dk0;
      ASSERT_STATUS_OK(cpu_->QkNormForward(HostView(out, {B, T, W}), HostView(rstd, {N, normed}),
                                           HostView(in, {B, T, W}), HostView(qw, {HD}),
                                           HostView(kw, {HD}), c.NH, c.NKV, eps));
      ASSERT_STATUS_OK(cpu_->QkNormBackward(
          HostView(din, {B, T, W}), HostView(dq, {HD}), HostView(dk, {HD}),
          HostView(dout, {B, T, W}), HostView(in, {B, T, W}), HostView(qw, {HD}),
          HostView(kw, {HD}), HostView(rstd, {N, normed}), c.NH, c.NKV));

      auto g_in = On(gpu, dt, in, {B, T, W}), g_qw = On(gpu, dt, qw, {HD}),
           g_kw = On(gpu, dt, kw, {HD});
      auto g_out = On(gpu, dt, std::vector<float>(c.size(), 7.f), {B, T, W});
      auto g_rstd = On(gpu, f32, std::vector<float>(N * normed), {N, normed});
      auto g_dout = On(gpu, dt, dout, {B, T, W});
      auto g_din = On(gpu, dt, std::vector<float>(c.size(), 7.f), {B, T, W});  // overwritten
      auto g_dq = On(gpu, f32, dq0, {HD}), g_dk = On(gpu, f32, dk0, {HD});
      ASSERT_STATUS_OK(gpu->QkNormForward(g_out->tensor(), g_rstd->tensor(), g_in->tensor(),
                                          g_qw->tensor(), g_kw->tensor(), c.NH, c.NKV, eps));
      const std::vector<float> got_out = g_out->Download();
      EXPECT_RELATIVE_ERROR_BELOW(got_out, out, tol.out);
      EXPECT_RELATIVE_ERROR_BELOW(g_rstd->Download(), rstd, tol.stats);
      EXPECT_BITWISE_EQUAL(Columns(got_out, W, normed * HD, c.NKV * HD),
                           Columns(in, W, normed * HD, c.NKV * HD))
          << "v heads copied";
      auto backward = [&](DeviceBuffer* din_buffer, DeviceBuffer* dout_buffer) {
        return gpu->QkNormBackward(din_buffer->tensor(), g_dq->tensor(), g_dk->tensor(),
                                   dout_buffer->tensor(), g_in->tensor(), g_qw->tensor(),
                                   g_kw->tensor(), g_rstd->tensor(), c.NH, c.NKV);
      };
      ASSERT_STATUS_OK(backward(g_din.get(), g_dout.get()));
      const std::vector<float> got_din = g_din->Download(), got_dq = g_dq->Download(),
                               got_dk = g_dk->Download();
      EXPECT_RELATIVE_ERROR_BELOW(got_din, din, tol.grad);
      EXPECT_RELATIVE_ERROR_BELOW(Minus(got_dq, dq0), Minus(dq, dq0), tol.weight_grad);
      EXPECT_RELATIVE_ERROR_BELOW(Minus(got_dk, dk0), Minus(dk, dk0), tol.weight_grad);
      // Again with din over dout: the same bits, and the same weight gradients (deterministic).
      ASSERT_TRUE(g_dq->Upload(dq0).ok() && g_dk->Upload(dk0).ok());
      ASSERT_STATUS_OK(backward(g_dout.get(), g_dout.get()));
      EXPECT_BITWISE_EQUAL(g_dout->Download(), got_din) << "din over dout";
      EXPECT_BITWISE_EQUAL(g_dq->Download(), got_dq) << "dq_weight, two identical runs";
      EXPECT_BITWISE_EQUAL(g_dk->Download(), got_dk) << "dk_weight, two identical runs";
    }
  });
}

// (2, P, HD/2): cos then sin of t * 10000^(-2i/HD).
std::vector<float> RopeTable(int P, int HD) {
  const int half = HD / 2;
  std::vector<float> table(2 * static_cast<size_t>(P) * half);
  for (int t = 0; t < P; ++t)
    for (int i = 0; i < half; ++i) {
      const double angle = t * std::pow(10000.0, -2.0 * i / HD);
      table[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      table[(static_cast<size_t>(P) + t) * half + i] = static_cast<float>(std::sin(angle));
    }
  return table;
}

// Pairs of two adjacent i per thread (HD/2 even) and of one (HD/2 odd: 6, 34); more positions in
// the table than the sequence has.
constexpr HeadsCase kRopeCases[] = {
    {2, 37, 8, 2, 128}, {1, 50, 4, 4, 64}, {3, 7, 2, 1, 6}, {1, 16, 3, 1, 34}};

TEST_F(CudaLlamaOpsTest, RopeForwardAndBackwardMatchCpu) {
  ForEachDtype([&](CudaBackend* gpu, const Tolerance& tol) {
    for (const HeadsCase& c : kRopeCases) {
      SCOPED_TRACE(c.text());
      const int64_t B = c.B, T = c.T, W = c.width(), half = c.HD / 2, P = c.T + 5;
      const int64_t rotated = static_cast<int64_t>(c.NH + c.NKV) * c.HD;
      const DType dt = gpu->compute_dtype();
      std::vector<float> table = RopeTable(static_cast<int>(P), c.HD);
      const std::vector<float> qkv = Random(c.size(), -2.f, 2.f), dqkv = Random(c.size());
      std::vector<float> want = qkv, want_grad = dqkv;
      ASSERT_STATUS_OK(
          cpu_->RopeForward(HostView(want, {B, T, W}), HostView(table, {2, P, half}), c.NH, c.NKV));
      ASSERT_STATUS_OK(cpu_->RopeBackward(HostView(want_grad, {B, T, W}),
                                          HostView(table, {2, P, half}), c.NH, c.NKV));

      auto g_table = On(gpu, DType::kF32, table, {2, P, half});
      auto g_qkv = On(gpu, dt, qkv, {B, T, W}), g_dqkv = On(gpu, dt, dqkv, {B, T, W});
      ASSERT_STATUS_OK(gpu->RopeForward(g_qkv->tensor(), g_table->tensor(), c.NH, c.NKV));
      ASSERT_STATUS_OK(gpu->RopeBackward(g_dqkv->tensor(), g_table->tensor(), c.NH, c.NKV));
      const std::vector<float> got = g_qkv->Download(), got_grad = g_dqkv->Download();
      EXPECT_RELATIVE_ERROR_BELOW(got, want, tol.out);
      EXPECT_RELATIVE_ERROR_BELOW(got_grad, want_grad, tol.out);
      EXPECT_BITWISE_EQUAL(Columns(got, W, rotated, W - rotated),
                           Columns(qkv, W, rotated, W - rotated))
          << "v heads untouched";
      // The backward rotation undoes the forward one (to the rounding of the two passes).
      ASSERT_STATUS_OK(gpu->RopeBackward(g_qkv->tensor(), g_table->tensor(), c.NH, c.NKV));
      EXPECT_RELATIVE_ERROR_BELOW(g_qkv->Download(), qkv, 2 * tol.out);
    }
  });
}

// Data.packing: documents: positions from each document's start (doc_starts), against the CPU.
TEST_F(CudaLlamaOpsTest, RopeWithDocumentStartsMatchesCpu) {
  ForEachDtype([&](CudaBackend* gpu, const Tolerance& tol) {
    const HeadsCase c = kRopeCases[0];
    SCOPED_TRACE(c.text());
    const int64_t B = c.B, T = c.T, W = c.width(), half = c.HD / 2;
    const DType dt = gpu->compute_dtype();
    std::vector<int32_t> starts;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) starts.push_back(t < 11 ? 0 : t < 30 ? 11 : 30);
    std::vector<float> table = RopeTable(static_cast<int>(T), c.HD);
    const std::vector<float> qkv = Random(c.size(), -2.f, 2.f), dqkv = Random(c.size());
    std::vector<float> want = qkv, want_grad = dqkv;
    const Tensor cpu_starts(starts.data(), DType::kI32, {B, T});
    ASSERT_STATUS_OK(cpu_->RopeForward(HostView(want, {B, T, W}), HostView(table, {2, T, half}),
                                       c.NH, c.NKV, cpu_starts));
    ASSERT_STATUS_OK(cpu_->RopeBackward(HostView(want_grad, {B, T, W}),
                                        HostView(table, {2, T, half}), c.NH, c.NKV, cpu_starts));
    DeviceBuffer g_starts(gpu, DType::kI32, {B, T});
    ASSERT_STATUS_OK(g_starts.UploadInts(starts));
    auto g_table = On(gpu, DType::kF32, table, {2, T, half});
    auto g_qkv = On(gpu, dt, qkv, {B, T, W}), g_dqkv = On(gpu, dt, dqkv, {B, T, W});
    ASSERT_STATUS_OK(
        gpu->RopeForward(g_qkv->tensor(), g_table->tensor(), c.NH, c.NKV, g_starts.tensor()));
    ASSERT_STATUS_OK(
        gpu->RopeBackward(g_dqkv->tensor(), g_table->tensor(), c.NH, c.NKV, g_starts.tensor()));
    EXPECT_RELATIVE_ERROR_BELOW(g_qkv->Download(), want, tol.out);
    EXPECT_RELATIVE_ERROR_BELOW(g_dqkv->Download(), want_grad, tol.out);
  });
}

// ---- SwiGLU: gate_up (N,2F) ----
// 16-byte chunks (F a whole number of them in both dtypes) and single elements (F = 1001, 46).
constexpr NormShape kSwiGluShapes[] = {{64, 256}, {37, 344}, {5, 1001}, {300, 2048}, {9, 46}};

TEST_F(CudaLlamaOpsTest, SwiGluForwardAndBackwardMatchCpu) {
  ForEachDtype([&](CudaBackend* gpu, const Tolerance& tol) {
    for (const NormShape& s : kSwiGluShapes) {
      const int64_t N = s.N, F = s.C;
      SCOPED_TRACE(StrFormat("N=%lld F=%lld", (long long)N, (long long)F));
      const DType dt = gpu->compute_dtype();
      std::vector<float> gate_up = Random(N * 2 * F, -5.f, 5.f), dout = Random(N * F);
      std::vector<float> out(N * F), dgate_up(N * 2 * F);
      ASSERT_STATUS_OK(cpu_->SwiGluForward(HostView(out, {N, F}), HostView(gate_up, {N, 2 * F})));
      ASSERT_STATUS_OK(cpu_->SwiGluBackward(HostView(dgate_up, {N, 2 * F}), HostView(dout, {N, F}),
                                            HostView(gate_up, {N, 2 * F})));
      auto g_gate_up = On(gpu, dt, gate_up, {N, 2 * F}), g_dout = On(gpu, dt, dout, {N, F});
      auto g_out = On(gpu, dt, std::vector<float>(N * F, 7.f), {N, F});
      auto g_dgate_up = On(gpu, dt, std::vector<float>(N * 2 * F, 7.f), {N, 2 * F});
      ASSERT_STATUS_OK(gpu->SwiGluForward(g_out->tensor(), g_gate_up->tensor()));
      ASSERT_STATUS_OK(
          gpu->SwiGluBackward(g_dgate_up->tensor(), g_dout->tensor(), g_gate_up->tensor()));
      EXPECT_RELATIVE_ERROR_BELOW(g_out->Download(), out, tol.out);
      const std::vector<float> got = g_dgate_up->Download();
      EXPECT_RELATIVE_ERROR_BELOW(Columns(got, 2 * F, 0, F), Columns(dgate_up, 2 * F, 0, F),
                                  tol.out);
      EXPECT_RELATIVE_ERROR_BELOW(Columns(got, 2 * F, F, F), Columns(dgate_up, 2 * F, F, F),
                                  tol.out);
      // With act: the same dgate_up and the forward's out, both to the bit.
      auto g_act = On(gpu, dt, std::vector<float>(N * F, 3.f), {N, F});
      auto g_dgate_up_act = On(gpu, dt, std::vector<float>(N * 2 * F, 7.f), {N, 2 * F});
      ASSERT_STATUS_OK(gpu->SwiGluBackward(g_dgate_up_act->tensor(), g_dout->tensor(),
                                           g_gate_up->tensor(), g_act->tensor()));
      ASSERT_EQ(g_dgate_up_act->Download(), got);
      ASSERT_EQ(g_act->Download(), g_out->Download());
    }
  });
}

// ---- grouped-query attention ----
struct GqaCase {
  int B, T, NH, NKV, HS;
  HeadsCase heads() const { return HeadsCase{B, T, NH, NKV, HS}; }
};

struct AttentionResult {
  std::vector<float> out, stats, dqkv;
};

// qkv (B,T,(NH+2*NKV)*HS) -> (B,T,3*NH*HS), each kv head repeated for its query group.
std::vector<float> RepeatKv(const std::vector<float>& qkv, const GqaCase& c) {
  const int64_t rows = c.heads().rows(), W = c.heads().width(), W3 = 3LL * c.NH * c.HS;
  const int group = c.NH / c.NKV;
  std::vector<float> out(rows * W3);
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < c.NH; ++h) {
      const int64_t src[3] = {h, c.NH + h / group, c.NH + c.NKV + h / group};
      for (int part = 0; part < 3; ++part)
        std::copy_n(qkv.begin() + r * W + src[part] * c.HS, c.HS,
                    out.begin() + r * W3 + (part * c.NH + h) * static_cast<int64_t>(c.HS));
    }
  return out;
}

// dqkv (B,T,3*NH*HS) -> (B,T,(NH+2*NKV)*HS): a kv head's gradient summed over its query group.
std::vector<float> SumKvGroups(const std::vector<float>& dqkv, const GqaCase& c) {
  const int64_t rows = c.heads().rows(), W = c.heads().width(), W3 = 3LL * c.NH * c.HS;
  const int group = c.NH / c.NKV;
  std::vector<float> out(rows * W, 0.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < c.NH; ++h) {
      const int64_t dst[3] = {h, c.NH + h / group, c.NH + c.NKV + h / group};
      for (int part = 0; part < 3; ++part)
        for (int d = 0; d < c.HS; ++d)
          out[r * W + dst[part] * c.HS + d] += dqkv[r * W3 + (part * c.NH + h) * c.HS + d];
    }
  return out;
}

class CudaGqaTest : public CudaLlamaOpsTest {
 protected:
  void RunCpu(const GqaCase& c, const std::vector<float>& qkv, std::vector<float> dout,
              AttentionResult* r) {
    const int64_t B = c.B, T = c.T, C = static_cast<int64_t>(c.NH) * c.HS;
    std::vector<float> mha = RepeatKv(qkv, c), dmha(B * T * 3 * C);
    r->out.assign(B * T * C, 0.f);
    r->stats.assign(B * c.NH * T, 0.f);
    ASSERT_STATUS_OK(cpu_->AttentionForward(HostView(r->out, {B, T, C}),
                                            HostView(r->stats, {B, c.NH, T}),
                                            HostView(mha, {B, T, 3 * C}), c.NH));
    ASSERT_STATUS_OK(cpu_->AttentionBackward(
        HostView(dmha, {B, T, 3 * C}), HostView(dout, {B, T, C}), HostView(mha, {B, T, 3 * C}),
        HostView(r->out, {B, T, C}), HostView(r->stats, {B, c.NH, T}), c.NH));
    r->dqkv = SumKvGroups(dmha, c);
  }
  // Forward then backward (from the backend's own out and stats); each a second time, which must
  // give the same bits (the backward only on our kernels: cuDNN may add dq in another order).
  void RunGpu(CudaBackend* gpu, const GqaCase& c, const std::vector<float>& qkv,
              const std::vector<float>& dout, bool fallback, AttentionResult* r) {
    const int64_t B = c.B, T = c.T, C = static_cast<int64_t>(c.NH) * c.HS, W = c.heads().width();
    const DType dt = gpu->compute_dtype();
    auto g_qkv = On(gpu, dt, qkv, {B, T, W});
    auto g_dqkv = On(gpu, dt, std::vector<float>(c.heads().size(), 7.f), {B, T, W});
    auto g_out = On(gpu, dt, std::vector<float>(B * T * C), {B, T, C});
    auto g_dout = On(gpu, dt, dout, {B, T, C});
    auto g_stats = On(gpu, DType::kF32, std::vector<float>(B * c.NH * T), {B, c.NH, T});
    auto forward = [&] {
      return gpu->AttentionForward(g_out->tensor(), g_stats->tensor(), g_qkv->tensor(), c.NH,
                                   c.NKV);
    };
    auto backward = [&] {
      return gpu->AttentionBackward(g_dqkv->tensor(), g_dout->tensor(), g_qkv->tensor(),
                                    g_out->tensor(), g_stats->tensor(), c.NH, c.NKV);
    };
    ASSERT_STATUS_OK(forward());
    ASSERT_STATUS_OK(backward());
    r->out = g_out->Download();
    r->stats = g_stats->Download();
    r->dqkv = g_dqkv->Download();
    ASSERT_STATUS_OK(forward());
    EXPECT_BITWISE_EQUAL(g_out->Download(), r->out);
    EXPECT_BITWISE_EQUAL(g_stats->Download(), r->stats);
    if (fallback) {
      ASSERT_TRUE(g_dqkv->Upload(std::vector<float>(c.heads().size(), 7.f)).ok());
      ASSERT_STATUS_OK(backward());
      EXPECT_BITWISE_EQUAL(g_dqkv->Download(), r->dqkv) << "dqkv, two identical runs";
    }
  }
};

class CudaGqaShapesTest : public CudaGqaTest,
                          public ::testing::WithParamInterface<std::tuple<GqaCase, bool>> {};

TEST_P(CudaGqaShapesTest, ForwardAndBackwardMatchCpu) {
  const GqaCase c = std::get<0>(GetParam());
  const bool fallback = std::get<1>(GetParam());
  SCOPED_TRACE(Trace() + ", " + c.heads().text() + StrFormat(" fallback=%d", fallback));
  if (!fallback && !CudaBackend::CudnnAttentionCompiled())
    GTEST_SKIP() << "built without the cuDNN frontend (scripts/fetch_cudnn_frontend.sh)";
  gpu_->set_force_attention_fallback(fallback);
  const std::vector<float> qkv = Random(c.heads().size(), -2.f, 2.f);
  const std::vector<float> dout = Random(c.heads().rows() * c.NH * c.HS);
  AttentionResult want, got;
  RunCpu(c, qkv, dout, &want);
  RunGpu(gpu_.get(), c, qkv, dout, fallback, &got);
  EXPECT_RELATIVE_ERROR_BELOW(got.out, want.out, 2e-2);
  EXPECT_RELATIVE_ERROR_BELOW(got.stats, want.stats, 5e-3);
  EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, want.dqkv, 3e-2);
  const CudaPathCounts& p = gpu_->path_counts();
  std::printf(
      "[gqa paths] %s fallback=%d: cudnn=%d fallback=%d (out %.2e, stats %.2e, dqkv %.2e)\n",
      c.heads().text().c_str(), fallback, p.attention_cudnn, p.attention_fallback,
      RelativeError(got.out, want.out), RelativeError(got.stats, want.stats),
      RelativeError(got.dqkv, want.dqkv));
  if (fallback) {
    EXPECT_EQ(p.attention_cudnn, 0);
  } else {
    EXPECT_EQ(p.attention_cudnn, 3) << "cuDNN rejected a shape it should run";  // fwd, bwd, fwd
  }
}

// T not a multiple of 64; grouped (8 query heads on 2 kv heads) and plain (4 on 4).
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGqaShapesTest,
    ::testing::Combine(::testing::Values(GqaCase{2, 77, 8, 2, 64}, GqaCase{1, 130, 8, 2, 128},
                                         GqaCase{2, 77, 4, 4, 64}, GqaCase{1, 130, 4, 4, 128}),
                       ::testing::Bool()));

// The fallback kernels in f32: only the order of additions differs from the CPU reference.
TEST_F(CudaGqaTest, FallbackInF32MatchesCpuToF32Precision) {
  std::unique_ptr<CudaBackend> gpu32;
  ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kF32, &gpu32));
  for (const GqaCase& c : {GqaCase{2, 45, 6, 2, 48}, GqaCase{1, 70, 4, 1, 160}}) {
    SCOPED_TRACE(Trace() + ", " + c.heads().text());
    const std::vector<float> qkv = RandomFloats(c.heads().size(), rng_, -2.f, 2.f);
    const std::vector<float> dout = RandomFloats(c.heads().rows() * c.NH * c.HS, rng_);
    AttentionResult want, got;
    RunCpu(c, qkv, dout, &want);
    RunGpu(gpu32.get(), c, qkv, dout, /*fallback=*/true, &got);
    EXPECT_RELATIVE_ERROR_BELOW(got.out, want.out, 1e-5);
    EXPECT_RELATIVE_ERROR_BELOW(got.stats, want.stats, 1e-5);
    EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, want.dqkv, 1e-4);
  }
  EXPECT_EQ(gpu32->path_counts().attention_cudnn, 0);  // cuDNN SDPA has no f32 graphs
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
