// GPU tests of the CUDA backend's layer ops against the CPU fp32 backend: embedding, LayerNorm
// (plain and fused with the residual add), matmul forward/backward through every cuBLASLt route
// (epilogues on and off, sizes that are not multiples of 8, the sm90 GELU GEMMs where they run),
// column sums, GELU backward and the elementwise ops. Inputs are fresh random
// values, rounded to bf16 so both backends see the same numbers.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "cuda_test_util.h"

namespace trainer {
namespace cuda_testing {
namespace {

using Shape = std::vector<int64_t>;

class CudaLayersTest : public CudaVsCpuTest {};

TEST_F(CudaLayersTest, EmbeddingMatchesCpu) {
  const int B = 3, T = 37, C = 72, V = 131, maxT = 40;
  for (int vocab_start : {0, 70}) {  // 70: a vocabulary shard, some tokens belong to others
    SCOPED_TRACE(Trace() + ", vocab_start " + std::to_string(vocab_start));
    std::vector<int32_t> tokens = RandomInts(B * T, rng_, 0, 200);
    std::vector<float> wte = Random(V * C), wpe = Random(maxT * C), dout = Random(B * T * C);
    const std::vector<float> dwte0 = RandomFloats(V * C, rng_),
                             dwpe0 = RandomFloats(maxT * C, rng_);
    std::vector<float> out(B * T * C), dwte = dwte0, dwpe = dwpe0;
    ASSERT_STATUS_OK(cpu_->EmbeddingForward(HostView(out, {B, T, C}), HostView(tokens, {B, T}),
                                            HostView(wte, {V, C}), HostView(wpe, {maxT, C}),
                                            vocab_start));
    ASSERT_STATUS_OK(cpu_->EmbeddingBackward(HostView(dwte, {V, C}), HostView(dwpe, {maxT, C}),
                                             HostView(dout, {B, T, C}), HostView(tokens, {B, T}),
                                             vocab_start));

    auto g_tokens = Ints(tokens, {B, T});
    auto g_wte = Compute(wte, {V, C}), g_wpe = Compute(wpe, {maxT, C});
    auto g_out = Compute(std::vector<float>(B * T * C), {B, T, C});
    auto g_dout = Compute(dout, {B, T, C});
    auto g_dwte = F32(dwte0, {V, C}), g_dwpe = F32(dwpe0, {maxT, C});
    ASSERT_STATUS_OK(gpu_->EmbeddingForward(g_out->tensor(), g_tokens->tensor(), g_wte->tensor(),
                                            g_wpe->tensor(), vocab_start));
    ASSERT_STATUS_OK(gpu_->EmbeddingBackward(g_dwte->tensor(), g_dwpe->tensor(), g_dout->tensor(),
                                             g_tokens->tensor(), vocab_start));
    EXPECT_RELATIVE_ERROR_BELOW(g_out->Download(), out, 1e-2);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(g_dwte->Download(), dwte0), Minus(dwte, dwte0), 1e-5);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(g_dwpe->Download(), dwpe0), Minus(dwpe, dwpe0), 1e-5);
  }
}

// LayerNorm shapes that reach every path of layernorm.cu. In bf16 (8 per 16 bytes), the forward's
// register path with 1 to 8 vectors per lane, and the backward's register path with a row per
// warp and one vector per lane with idle lanes (74 x 200; three blocks, the last one shorter) or
// two (50 x 328), a row per two warps with idle lanes in the second and the grid at its cap with a
// ragged last block (13001 x 768) or full (9001 x 1024), per four warps (37 x 1032, 3001 x 2048)
// and per eight (9 x 2056, and 3 x 4096: the longest row, 48 KiB of shared memory with din's
// sums); the generic paths for an odd C (45 x 201) and for rows too long for registers (5 x 4104).
// In f32 (4 per 16 bytes) the same C take one to eight warps per row (50, 82, 192, 256, 258 and
// 512 vectors), then the generic paths.
struct LayerNormShape {
  int N, C;
};
constexpr LayerNormShape kLayerNormShapes[] = {{74, 200},  {50, 328},    {13001, 768}, {9001, 1024},
                                               {37, 1032}, {3001, 2048}, {9, 2056},    {3, 4096},
                                               {45, 201},  {5, 4104}};

class CudaLayerNormTest : public CudaVsCpuTest {
 protected:
  // Runs `check` for every shape, on the bf16 backend and on an f32 one.
  template <typename Check>
  void ForEachShapeAndDtype(const Check& check) {
    std::unique_ptr<CudaBackend> gpu32;
    ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kF32, &gpu32));
    for (CudaBackend* gpu : {gpu_.get(), gpu32.get()}) {
      for (const LayerNormShape& s : kLayerNormShapes) {
        SCOPED_TRACE(Trace() +
                     StrFormat(", %s N=%d C=%d", DTypeName(gpu->compute_dtype()), s.N, s.C));
        check(gpu, s.N, s.C);
      }
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

TEST_F(CudaLayerNormTest, ForwardAndBackwardMatchCpu) {
  ForEachShapeAndDtype([&](CudaBackend* gpu, int N, int C) {
    const size_t NC = static_cast<size_t>(N) * C;
    const DType dt = gpu->compute_dtype(), f32 = DType::kF32;
    std::vector<float> in = Random(NC, -2.f, 3.f), weight = Random(C, 0.5f, 1.5f), bias = Random(C),
                       dout = Random(NC);
    const std::vector<float> din0 = Random(NC), dw0 = RandomFloats(C, rng_),
                             db0 = RandomFloats(C, rng_), sums0 = RandomFloats(C, rng_);
    std::vector<float> out(NC), mean(N), rstd(N), din = din0, dw = dw0, db = db0, sums = sums0;
    ASSERT_STATUS_OK(cpu_->LayerNormForward(HostView(out, {N, C}), HostView(mean, {N}),
                                            HostView(rstd, {N}), HostView(in, {N, C}),
                                            HostView(weight, {C}), HostView(bias, {C})));
    ASSERT_STATUS_OK(
        cpu_->LayerNormBackward(HostView(din, {N, C}), HostView(dw, {C}), HostView(db, {C}),
                                HostView(sums, {C}), HostView(dout, {N, C}), HostView(in, {N, C}),
                                HostView(weight, {C}), HostView(mean, {N}), HostView(rstd, {N})));
    // din's column sums on entry, summed here in double: the reference for both backends.
    std::vector<double> column_sums(C, 0.0);
    for (size_t i = 0; i < NC; ++i) column_sums[i % C] += din0[i];
    std::vector<float> want_sums(C);
    for (int c = 0; c < C; ++c) want_sums[c] = static_cast<float>(column_sums[c]);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(sums, sums0), want_sums, 1e-5);

    auto g_in = On(gpu, dt, in, {N, C}), g_w = On(gpu, dt, weight, {C}),
         g_b = On(gpu, dt, bias, {C});
    auto g_out = On(gpu, dt, std::vector<float>(NC), {N, C});
    auto g_mean = On(gpu, f32, std::vector<float>(N), {N}),
         g_rstd = On(gpu, f32, std::vector<float>(N), {N});
    auto g_dout = On(gpu, dt, dout, {N, C}), g_din = On(gpu, dt, din0, {N, C});
    auto g_dw = On(gpu, f32, dw0, {C}), g_db = On(gpu, f32, db0, {C});
    auto g_sums = On(gpu, f32, sums0, {C});
    ASSERT_STATUS_OK(gpu->LayerNormForward(g_out->tensor(), g_mean->tensor(), g_rstd->tensor(),
                                           g_in->tensor(), g_w->tensor(), g_b->tensor()));
    // Backward from the GPU's own statistics (as in training), with or without din's sums.
    auto backward = [&](bool with_sums) {
      return gpu->LayerNormBackward(
          g_din->tensor(), g_dw->tensor(), g_db->tensor(), with_sums ? g_sums->tensor() : Tensor(),
          g_dout->tensor(), g_in->tensor(), g_w->tensor(), g_mean->tensor(), g_rstd->tensor());
    };
    auto reset = [&] {
      ASSERT_TRUE(g_din->Upload(din0).ok() && g_dw->Upload(dw0).ok() && g_db->Upload(db0).ok() &&
                  g_sums->Upload(sums0).ok());
    };
    const std::vector<float> first_out = g_out->Download(), first_mean = g_mean->Download(),
                             first_rstd = g_rstd->Download();
    ASSERT_STATUS_OK(gpu->LayerNormForward(g_out->tensor(), g_mean->tensor(), g_rstd->tensor(),
                                           g_in->tensor(), g_w->tensor(), g_b->tensor()));
    EXPECT_BITWISE_EQUAL(g_out->Download(), first_out);
    EXPECT_BITWISE_EQUAL(g_mean->Download(), first_mean);
    EXPECT_BITWISE_EQUAL(g_rstd->Download(), first_rstd);
    ASSERT_STATUS_OK(backward(true));
    EXPECT_RELATIVE_ERROR_BELOW(first_out, out, 1e-2);
    EXPECT_RELATIVE_ERROR_BELOW(first_mean, mean, 1e-5);
    EXPECT_RELATIVE_ERROR_BELOW(first_rstd, rstd, 1e-5);
    const std::vector<float> got_din = g_din->Download(), got_dw = g_dw->Download(),
                             got_db = g_db->Download(), got_sums = g_sums->Download();
    EXPECT_RELATIVE_ERROR_BELOW(Minus(got_din, din0), Minus(din, din0), 2e-2);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(got_dw, dw0), Minus(dw, dw0), 1e-4);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(got_db, db0), Minus(db, db0), 1e-5);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(got_sums, sums0), want_sums, 1e-5);
    // Summing din's columns leaves the other results bitwise as they are without it.
    reset();
    ASSERT_STATUS_OK(backward(false));
    EXPECT_BITWISE_EQUAL(g_din->Download(), got_din) << "din, with and without din's sums";
    EXPECT_BITWISE_EQUAL(g_dw->Download(), got_dw) << "dweight, with and without din's sums";
    EXPECT_BITWISE_EQUAL(g_db->Download(), got_db) << "dbias, with and without din's sums";
    EXPECT_BITWISE_EQUAL(g_sums->Download(), sums0) << "din's sums written when not asked for";
    // Deterministic: the same inputs give bitwise the same gradients.
    reset();
    ASSERT_STATUS_OK(backward(true));
    EXPECT_BITWISE_EQUAL(g_din->Download(), got_din) << "din, two identical runs";
    EXPECT_BITWISE_EQUAL(g_dw->Download(), got_dw) << "dweight, two identical runs";
    EXPECT_BITWISE_EQUAL(g_db->Download(), got_db) << "dbias, two identical runs";
    EXPECT_BITWISE_EQUAL(g_sums->Download(), got_sums) << "din's sums, two identical runs";
  });
}

TEST_F(CudaLayerNormTest, AddForwardMatchesAddThenLayerNormOnCpu) {
  ForEachShapeAndDtype([&](CudaBackend* gpu, int N, int C) {
    const size_t NC = static_cast<size_t>(N) * C;
    const DType dt = gpu->compute_dtype(), f32 = DType::kF32;
    std::vector<float> a = Random(NC), b = Random(NC), weight = Random(C, 0.5f, 1.5f),
                       bias = Random(C);
    // The GPU rounds the residual to its dtype before normalising it: the reference does the same.
    std::vector<float> residual(NC);
    for (size_t i = 0; i < NC; ++i) residual[i] = a[i] + b[i];
    residual = Rounded(residual, dt);
    std::vector<float> out(NC), mean(N), rstd(N);
    ASSERT_STATUS_OK(cpu_->LayerNormForward(HostView(out, {N, C}), HostView(mean, {N}),
                                            HostView(rstd, {N}), HostView(residual, {N, C}),
                                            HostView(weight, {C}), HostView(bias, {C})));
    for (bool alias_a : {true, false}) {  // residual written over a, or over b
      SCOPED_TRACE(alias_a ? "residual aliases a" : "residual aliases b");
      auto g_a = On(gpu, dt, a, {N, C}), g_b = On(gpu, dt, b, {N, C});
      auto g_w = On(gpu, dt, weight, {C}), g_bias = On(gpu, dt, bias, {C});
      auto g_out = On(gpu, dt, std::vector<float>(NC), {N, C});
      auto g_mean = On(gpu, f32, std::vector<float>(N), {N}),
           g_rstd = On(gpu, f32, std::vector<float>(N), {N});
      DeviceBuffer* g_residual = alias_a ? g_a.get() : g_b.get();
      ASSERT_STATUS_OK(gpu->AddLayerNormForward(g_residual->tensor(), g_out->tensor(),
                                                g_mean->tensor(), g_rstd->tensor(), g_a->tensor(),
                                                g_b->tensor(), g_w->tensor(), g_bias->tensor()));
      EXPECT_RELATIVE_ERROR_BELOW(g_residual->Download(), residual, 1e-6);
      EXPECT_RELATIVE_ERROR_BELOW(g_out->Download(), out, 1e-2);
      EXPECT_RELATIVE_ERROR_BELOW(g_rstd->Download(), rstd, 1e-5);
    }
  });
}

struct MatmulCase {
  int N, C, OC;
  bool bias;
  Activation act;
};

// How the GELU is computed: our kernel after the GEMM (no epilogues), cuBLASLt's epilogues, or
// (forward) cuDNN's fused matmul + bias + GELU graph or our sm90 GELU GEMM (cuBLASLt where that
// cannot run the shape).
enum class GeluRoute { kKernel, kCublasLt, kCudnn, kSm90, kFastest };

bool Sm90Gpu() {
#if defined(TRAINER_WITH_SM90_KERNELS)
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

// Whether the sm90 GELU GEMM runs a forward of this case on this GPU (sm90/gemm_gelu_forward.h).
bool Sm90GeluGemmRuns(const MatmulCase& c) {
  return Sm90Gpu() && c.act == Activation::kGelu && c.bias && c.N % 128 == 0 && c.OC % 256 == 0 &&
         c.C % 64 == 0 && c.C >= 192;
}

// Whether the sm90 GELU-gradient GEMM runs the case's backward through a GELU (din (N,C) from
// dout (N,OC); sm90/gemm_dgelu.h).
bool Sm90DgeluGemmRuns(const MatmulCase& c) {
  return Sm90Gpu() && c.N % 128 == 0 && c.C % 256 == 0 && c.OC % 64 == 0;
}

class CudaMatmulTest : public CudaVsCpuTest,
                       public ::testing::WithParamInterface<std::tuple<MatmulCase, GeluRoute>> {};

TEST_P(CudaMatmulTest, ForwardAndBackwardMatchCpu) {
  const MatmulCase c = std::get<0>(GetParam());
  const GeluRoute route = std::get<1>(GetParam());
  const bool epilogues = route != GeluRoute::kKernel;
  SCOPED_TRACE(Trace() + StrFormat(", N=%d C=%d OC=%d bias=%d gelu=%d route=%d", c.N, c.C, c.OC,
                                   c.bias, c.act == Activation::kGelu, static_cast<int>(route)));
  gpu_->set_matmul_epilogues(epilogues);
  gpu_->set_gelu_matmul_route(route == GeluRoute::kCudnn     ? GeluMatmulRoute::kCudnn
                              : route == GeluRoute::kSm90    ? GeluMatmulRoute::kSm90
                              : route == GeluRoute::kFastest ? GeluMatmulRoute::kFastest
                                                             : GeluMatmulRoute::kCublasLt);
  const bool gelu = c.act == Activation::kGelu;
  const int N = c.N, C = c.C, OC = c.OC;
  std::vector<float> in = Random(N * C), weight = Random(OC * C, -0.2f, 0.2f),
                     bias = c.bias ? Random(OC) : std::vector<float>(), dout = Random(N * OC);
  const std::vector<float> dw0 = RandomFloats(OC * C, rng_), db0 = RandomFloats(OC, rng_);
  std::vector<float> out(N * OC), pre(N * OC), din(N * C), dw = dw0, db = db0;
  const Tensor no_tensor;
  ASSERT_STATUS_OK(cpu_->MatmulForward(
      HostView(out, {N, OC}), gelu ? HostView(pre, {N, OC}) : no_tensor, HostView(in, {N, C}),
      HostView(weight, {OC, C}), c.bias ? HostView(bias, {OC}) : no_tensor, c.act));
  ASSERT_STATUS_OK(cpu_->MatmulBackward(HostView(din, {N, C}), HostView(dw, {OC, C}),
                                        c.bias ? HostView(db, {OC}) : no_tensor,
                                        HostView(dout, {N, OC}), HostView(in, {N, C}),
                                        HostView(weight, {OC, C}), GradientWrite::kAccumulate));

  auto g_in = Compute(in, {N, C}), g_w = Compute(weight, {OC, C});
  auto g_bias = c.bias ? Compute(bias, {OC}) : nullptr;
  auto g_out = Compute(std::vector<float>(N * OC), {N, OC});
  auto g_pre = Compute(std::vector<float>(N * OC), {N, OC});
  auto g_dout = Compute(dout, {N, OC}), g_din = Compute(std::vector<float>(N * C), {N, C});
  auto g_dw = F32(dw0, {OC, C}), g_db = F32(db0, {OC});
  // Called a few times: each call's out and pre are checked, and the calls after the first (which
  // times the routes and leaves the last one's result) agree bit for bit.
  constexpr int kForwardCalls = 3;
  std::vector<float> last_out, last_pre;
  for (int call = 0; call < kForwardCalls; ++call) {
    SCOPED_TRACE("forward call " + std::to_string(call));
    ASSERT_STATUS_OK(gpu_->MatmulForward(g_out->tensor(), gelu ? g_pre->tensor() : no_tensor,
                                         g_in->tensor(), g_w->tensor(),
                                         c.bias ? g_bias->tensor() : no_tensor, c.act));
    const std::vector<float> call_out = g_out->Download(), call_pre = g_pre->Download();
    EXPECT_RELATIVE_ERROR_BELOW(call_out, out, 1e-2);
    if (gelu) {
      EXPECT_RELATIVE_ERROR_BELOW(call_pre, pre, 1e-2);
    }
    if (call == kForwardCalls - 1) {
      EXPECT_BITWISE_EQUAL(call_out, last_out);
      if (gelu) {
        EXPECT_BITWISE_EQUAL(call_pre, last_pre);
      }
    }
    last_out = call_out, last_pre = call_pre;
  }
  ASSERT_STATUS_OK(gpu_->MatmulBackward(g_din->tensor(), g_dw->tensor(),
                                        c.bias ? g_db->tensor() : no_tensor, g_dout->tensor(),
                                        g_in->tensor(), g_w->tensor(), GradientWrite::kAccumulate));
  EXPECT_RELATIVE_ERROR_BELOW(g_din->Download(), din, 1e-2);
  EXPECT_RELATIVE_ERROR_BELOW(Minus(g_dw->Download(), dw0), Minus(dw, dw0), 1e-3);
  if (c.bias) {
    EXPECT_RELATIVE_ERROR_BELOW(Minus(g_db->Download(), db0), Minus(db, db0), 1e-4);
  }
  // dweight written over (beta = 0) instead of added to: the old contents play no part.
  auto g_dw_over = F32(dw0, {OC, C});
  ASSERT_STATUS_OK(gpu_->MatmulBackward(no_tensor, g_dw_over->tensor(), no_tensor, g_dout->tensor(),
                                        g_in->tensor(), g_w->tensor(), GradientWrite::kOverwrite));
  EXPECT_RELATIVE_ERROR_BELOW(g_dw_over->Download(), Minus(dw, dw0), 1e-3);
  // The linear layer feeding the residual stream: out = residual + in W^T + bias (one GEMM on the
  // GPU), against the CPU's MatmulForward followed by Add.
  if (!gelu) {
    std::vector<float> residual = Random(N * OC);
    std::vector<float> summed(N * OC);
    ASSERT_STATUS_OK(cpu_->MatmulForwardAddResidual(
        HostView(summed, {N, OC}), HostView(in, {N, C}), HostView(weight, {OC, C}),
        c.bias ? HostView(bias, {OC}) : no_tensor, HostView(residual, {N, OC})));
    auto g_residual = Compute(residual, {N, OC});
    auto g_summed = Compute(std::vector<float>(N * OC), {N, OC});
    ASSERT_STATUS_OK(gpu_->MatmulForwardAddResidual(
        g_summed->tensor(), g_in->tensor(), g_w->tensor(), c.bias ? g_bias->tensor() : no_tensor,
        g_residual->tensor()));
    const std::vector<float> first_summed = g_summed->Download();
    EXPECT_RELATIVE_ERROR_BELOW(first_summed, summed, 1e-2);
    ASSERT_STATUS_OK(gpu_->MatmulForwardAddResidual(
        g_summed->tensor(), g_in->tensor(), g_w->tensor(), c.bias ? g_bias->tensor() : no_tensor,
        g_residual->tensor()));
    EXPECT_BITWISE_EQUAL(g_summed->Download(), first_summed);
  }
  // Backward through a GELU that produced `in`: din before the GELU and its column sums (added
  // to), against the CPU's MatmulBackward followed by GeluBackward and ColumnSums
  // (pre-activations: the input itself, any values do).
  const std::vector<float> sums0 = RandomFloats(C, rng_);
  std::vector<float> din_gelu(N * C), dw_gelu = dw0, db_gelu = db0, sums_gelu = sums0;
  ASSERT_STATUS_OK(cpu_->MatmulBackwardThroughGelu(
      HostView(din_gelu, {N, C}), HostView(dw_gelu, {OC, C}),
      c.bias ? HostView(db_gelu, {OC}) : no_tensor, HostView(dout, {N, OC}), HostView(in, {N, C}),
      HostView(weight, {OC, C}), HostView(in, {N, C}), HostView(sums_gelu, {C}),
      GradientWrite::kAccumulate));
  // Called as often as the shape's route needs to be chosen (an untimed call, then 4 calls of
  // each of up to 7 candidates in turn) and once more: every candidate's din and sums are checked.
  constexpr int kThroughGeluCalls = 30;
  for (int call = 0; call < kThroughGeluCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    auto g_din_gelu = Compute(std::vector<float>(N * C), {N, C});
    auto g_dw_gelu = F32(dw0, {OC, C}), g_db_gelu = F32(db0, {OC}), g_sums_gelu = F32(sums0, {C});
    const int passes_before = gpu_->path_counts().din_sum_passes;
    ASSERT_STATUS_OK(gpu_->MatmulBackwardThroughGelu(
        g_din_gelu->tensor(), g_dw_gelu->tensor(), c.bias ? g_db_gelu->tensor() : no_tensor,
        g_dout->tensor(), g_in->tensor(), g_w->tensor(), g_in->tensor(), g_sums_gelu->tensor(),
        GradientWrite::kAccumulate));
    // Once the route is chosen (the last call), din is summed at most once: by the caller's
    // pass, or inside our kernel.
    if (call == kThroughGeluCalls - 1) {
      EXPECT_LE(gpu_->path_counts().din_sum_passes - passes_before, 1);
    }
    EXPECT_RELATIVE_ERROR_BELOW(g_din_gelu->Download(), din_gelu, 1e-2);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(g_dw_gelu->Download(), dw0), Minus(dw_gelu, dw0), 1e-3);
    EXPECT_RELATIVE_ERROR_BELOW(Minus(g_sums_gelu->Download(), sums0), Minus(sums_gelu, sums0),
                                1e-2);
  }
  const CudaPathCounts& p = gpu_->path_counts();
  std::printf(
      "[matmul paths] N=%d C=%d OC=%d bias=%d gelu=%d route=%d: gelu_epilogue=%d "
      "gelu_cudnn=%d gelu_sm90=%d dgelu_sm90=%d gelu_kernel=%d\n",
      N, C, OC, c.bias, gelu, static_cast<int>(route), p.gelu_epilogue, p.gelu_cudnn, p.gelu_sm90,
      p.dgelu_sm90, p.gelu_kernel);
  // The forced sm90 route takes every forward and every backward through the GELU where it can
  // run them, and never elsewhere; the fastest route takes ours in the gradient's calls that time
  // it (the untimed one, whose output is the last candidate's, ours, and 24 of its 28 trials, our
  // kernel's six variants) and the forward's where ours times fastest on the first call.
  if (route == GeluRoute::kFastest) {
    EXPECT_LE(p.gelu_sm90, Sm90GeluGemmRuns(c) ? kForwardCalls : 0);
    EXPECT_GE(p.dgelu_sm90, Sm90DgeluGemmRuns(c) ? 25 : 0);
    EXPECT_LE(p.dgelu_sm90, Sm90DgeluGemmRuns(c) ? kThroughGeluCalls : 0);
  } else {
    EXPECT_EQ(p.gelu_sm90, route == GeluRoute::kSm90 && Sm90GeluGemmRuns(c) ? kForwardCalls : 0);
    EXPECT_EQ(p.dgelu_sm90,
              route == GeluRoute::kSm90 && Sm90DgeluGemmRuns(c) ? kThroughGeluCalls : 0);
  }
  if (!epilogues) {
    EXPECT_EQ(p.gelu_epilogue, 0);
  }
  if (route != GeluRoute::kCudnn && route != GeluRoute::kFastest) {
    EXPECT_EQ(p.gelu_cudnn, 0);
  } else if (route == GeluRoute::kCudnn && gelu && N == 512 &&
             CudaBackend::CudnnAttentionCompiled()) {
    // the integration test's MLP shape takes cuDNN when forced
    EXPECT_EQ(p.gelu_cudnn, kForwardCalls);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaMatmulTest,
    ::testing::Combine(::testing::Values(MatmulCase{74, 96, 136, true, Activation::kGelu},
                                         MatmulCase{74, 96, 136, false, Activation::kGelu},
                                         MatmulCase{74, 96, 100, true, Activation::kGelu},
                                         MatmulCase{74, 96, 136, true, Activation::kNone},
                                         MatmulCase{37, 64, 257, true, Activation::kNone},
                                         MatmulCase{130, 72, 384, false, Activation::kNone},
                                         // The GPU integration test's block (4 x 128 tokens,
                                         // C = 128): qkv, projection, MLP, qkv with TP=2.
                                         MatmulCase{512, 128, 384, true, Activation::kNone},
                                         MatmulCase{512, 128, 128, true, Activation::kNone},
                                         MatmulCase{512, 128, 512, true, Activation::kGelu},
                                         MatmulCase{512, 512, 128, true, Activation::kNone},
                                         MatmulCase{512, 128, 192, true, Activation::kNone},
                                         // A shape of the sm90 GELU GEMM's tiles.
                                         MatmulCase{512, 256, 1024, true, Activation::kGelu}),
                       ::testing::Values(GeluRoute::kKernel, GeluRoute::kCublasLt,
                                         GeluRoute::kCudnn, GeluRoute::kSm90,
                                         GeluRoute::kFastest)));

// ColumnSums: a block of columns of a wider matrix, plain and row-weighted, through the 16-byte
// loads (columns and row stride multiples of 8) and the one-column loads (odd ones).
TEST_F(CudaLayersTest, ColumnSumsMatchCpu) {
  struct Case {
    int N, C, first, W;
  };
  for (const Case c : {Case{1000, 3 * 64, 0, 64}, Case{517, 3 * 64, 128, 64}, Case{77, 45, 9, 13},
                       Case{3000, 1024, 0, 1024}}) {
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(Trace() + ", N " + std::to_string(c.N) + ", C " + std::to_string(c.C) +
                   ", first " + std::to_string(c.first) + (weighted ? ", weighted" : ""));
      std::vector<float> in = Random(c.N * c.C), weights = RandomFloats(c.N, rng_);
      const std::vector<float> out0 = RandomFloats(c.W, rng_);
      std::vector<float> out = out0;
      const Tensor w_cpu = weighted ? HostView(weights, {c.N}) : Tensor();
      ASSERT_STATUS_OK(
          cpu_->ColumnSums(HostView(out, {c.W}), HostView(in, {c.N, c.C}), c.first, w_cpu));
      auto g_in = Compute(in, {c.N, c.C});
      auto g_weights = F32(weights, {c.N});
      auto g_out = F32(out0, {c.W});
      ASSERT_STATUS_OK(gpu_->ColumnSums(g_out->tensor(), g_in->tensor(), c.first,
                                        weighted ? g_weights->tensor() : Tensor()));
      EXPECT_RELATIVE_ERROR_BELOW(Minus(g_out->Download(), out0), Minus(out, out0), 1e-5);
    }
  }
}

// The column-block products of LoRA's adapters (a block of a fused q/k/v or gate/up output from
// a block of the group's stacked x A^T, and the base linear onto a whole output, read and
// written in place through the leading dimensions) against the CPU twin: the block written or
// added to, with and without a bias and a scale, the columns outside it untouched; din written
// and added to in a block, dweight added to.
TEST_F(CudaLayersTest, ColumnBlockMatmulsMatchCpu) {
  struct Case {
    int N, R, RW, r0, C, CW, c0, W, first, OC;
  };
  // k of a fused qkv from the second of three stacked x A^T, gate of gate/up, a whole-width block
  // (the base GEMM onto the adapters' output), odd offsets and widths.
  for (const Case c : {Case{512, 16, 48, 16, 128, 128, 0, 384, 256, 64},
                       Case{300, 16, 32, 0, 128, 256, 128, 1024, 0, 512},
                       Case{256, 64, 64, 0, 64, 64, 0, 64, 0, 64},
                       Case{77, 5, 12, 4, 9, 20, 7, 45, 13, 11}}) {
    SCOPED_TRACE(Trace() + StrFormat(", N=%d R=%d of %d C=%d of %d W=%d first=%d OC=%d", c.N, c.R,
                                     c.RW, c.C, c.CW, c.W, c.first, c.OC));
    const std::vector<float> out0 = Random(c.N * c.W), din0 = Random(c.N * c.CW),
                             dw0 = RandomFloats(c.OC * c.C, rng_);
    std::vector<float> in = Random(c.N * c.RW), w = Random(c.OC * c.R, -0.5f, 0.5f),
                       bias = Random(c.OC), dout = Random(c.N * c.W), x = Random(c.N * c.CW),
                       wx = Random(c.OC * c.C, -0.5f, 0.5f);
    auto g_in = Compute(in, {c.N, c.RW});
    auto g_w = Compute(w, {c.OC, c.R}), g_bias = Compute(bias, {c.OC});
    for (bool accumulate : {false, true})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(std::string(accumulate ? "out added to" : "out written") +
                     (with_bias ? ", bias, alpha 0.75" : ""));
        const float alpha = with_bias ? 0.75f : 1.f;
        const GradientWrite write =
            accumulate ? GradientWrite::kAccumulate : GradientWrite::kOverwrite;
        std::vector<float> out = out0;
        ASSERT_STATUS_OK(cpu_->MatmulColumns(Columns(HostView(out, {c.N, c.W}), c.first, c.OC),
                                             write, Columns(HostView(in, {c.N, c.RW}), c.r0, c.R),
                                             HostView(w, {c.OC, c.R}),
                                             with_bias ? HostView(bias, {c.OC}) : Tensor(), alpha));
        auto g_out = Compute(out0, {c.N, c.W});
        ASSERT_STATUS_OK(gpu_->MatmulColumns(Columns(g_out->tensor(), c.first, c.OC), write,
                                             Columns(g_in->tensor(), c.r0, c.R), g_w->tensor(),
                                             with_bias ? g_bias->tensor() : Tensor(), alpha));
        const std::vector<float> got = g_out->Download();
        EXPECT_RELATIVE_ERROR_BELOW(got, out, 1e-2);
        for (int n = 0; n < c.N; ++n)
          for (int j = 0; j < c.W; ++j)
            if (j < c.first || j >= c.first + c.OC) {
              ASSERT_EQ(got[n * c.W + j], out0[n * c.W + j]) << "row " << n << " column " << j;
            }
      }
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "din added to, alpha 0.75" : "din written");
      const GradientWrite write = accumulate ? GradientWrite::kAccumulate
                                             : GradientWrite::kOverwrite;
      const float alpha = accumulate ? 0.75f : 1.f;
      std::vector<float> din = din0, dw = dw0;
      ASSERT_STATUS_OK(cpu_->MatmulBackwardColumns(
          Columns(HostView(din, {c.N, c.CW}), c.c0, c.C), write, HostView(dw, {c.OC, c.C}),
          Columns(HostView(dout, {c.N, c.W}), c.first, c.OC),
          Columns(HostView(x, {c.N, c.CW}), c.c0, c.C), HostView(wx, {c.OC, c.C}), alpha));
      auto g_din = Compute(din0, {c.N, c.CW}), g_dw = F32(dw0, {c.OC, c.C});
      auto g_dout = Compute(dout, {c.N, c.W}), g_x = Compute(x, {c.N, c.CW});
      auto g_wx = Compute(wx, {c.OC, c.C});
      ASSERT_STATUS_OK(gpu_->MatmulBackwardColumns(
          Columns(g_din->tensor(), c.c0, c.C), write, g_dw->tensor(),
          Columns(g_dout->tensor(), c.first, c.OC), Columns(g_x->tensor(), c.c0, c.C),
          g_wx->tensor(), alpha));
      const std::vector<float> got = g_din->Download();
      EXPECT_RELATIVE_ERROR_BELOW(got, din, 1e-2);
      for (int n = 0; n < c.N; ++n)
        for (int j = 0; j < c.CW; ++j)
          if (j < c.c0 || j >= c.c0 + c.C) {
            ASSERT_EQ(got[n * c.CW + j], din0[n * c.CW + j]) << "row " << n << " column " << j;
          }
      EXPECT_RELATIVE_ERROR_BELOW(Minus(g_dw->Download(), dw0), Minus(dw, dw0), 1e-3);
    }
  }
}

TEST_F(CudaLayersTest, GeluBackwardInPlaceMatchesCpu) {
  SCOPED_TRACE(Trace());
  const int n = 4097;
  std::vector<float> pre = Random(n, -4.f, 4.f), dy = Random(n), dx(n);
  ASSERT_STATUS_OK(cpu_->GeluBackward(HostView(dx, {n}), HostView(dy, {n}), HostView(pre, {n})));
  auto g_pre = Compute(pre, {n}), g_dy = Compute(dy, {n});
  ASSERT_STATUS_OK(gpu_->GeluBackward(g_dy->tensor(), g_dy->tensor(), g_pre->tensor()));
  EXPECT_RELATIVE_ERROR_BELOW(g_dy->Download(), dx, 1e-2);
}

TEST_F(CudaLayersTest, ElementwiseOpsMatchHostArithmetic) {
  SCOPED_TRACE(Trace());
  const int n = 1000;
  const std::vector<float> a = Random(n), b = Random(n);
  const std::vector<float> x = RandomFloats(n, rng_);
  std::vector<float> sum(n), scaled(n), rounded(n);
  for (int i = 0; i < n; ++i) {
    sum[i] = a[i] + b[i];
    scaled[i] = x[i] * 0.37f;
    rounded[i] = BF16ToFloat(FloatToBF16(x[i]));
  }
  auto g_a = Compute(a, {n}), g_b = Compute(b, {n}), g_out = Compute(std::vector<float>(n), {n});
  ASSERT_STATUS_OK(gpu_->Add(g_out->tensor(), g_a->tensor(), g_b->tensor()));
  EXPECT_RELATIVE_ERROR_BELOW(g_out->Download(), sum, 4e-3);
  ASSERT_STATUS_OK(gpu_->AddInPlace(g_a->tensor(), g_b->tensor()));
  EXPECT_RELATIVE_ERROR_BELOW(g_a->Download(), sum, 4e-3);

  auto g_x = F32(x, {n}), g_half = Compute(std::vector<float>(n), {n});
  ASSERT_STATUS_OK(gpu_->Scale(g_x->tensor(), 0.37f));
  EXPECT_RELATIVE_ERROR_BELOW(g_x->Download(), scaled, 1e-7);
  g_x = F32(x, {n});
  ASSERT_STATUS_OK(gpu_->Convert(g_half->tensor(), g_x->tensor()));  // f32 -> bf16 (RNE)
  EXPECT_EQ(g_half->Download(), rounded);
  ASSERT_STATUS_OK(gpu_->Convert(g_x->tensor(), g_half->tensor()));  // bf16 -> f32, exact
  EXPECT_EQ(g_x->Download(), rounded);
  ASSERT_STATUS_OK(gpu_->Zero(g_x->tensor()));
  EXPECT_EQ(g_x->Download(), std::vector<float>(n, 0.f));
}

TEST_F(CudaLayersTest, AllocateIsZeroFilledAndShapeErrorsAreReported) {
  DeviceBuffer buffer(gpu_.get(), DType::kF32, {12345});
  ASSERT_STATUS_OK(buffer.status());
  EXPECT_EQ(buffer.Download(), std::vector<float>(12345, 0.f));
  // A wrong shape is an error Status naming the op and the tensor, not a crash.
  auto g_a = Compute(Random(10), {10}), g_b = Compute(Random(11), {11});
  const Status s = gpu_->Add(g_a->tensor(), g_a->tensor(), g_b->tensor());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Add"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("b (11)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
