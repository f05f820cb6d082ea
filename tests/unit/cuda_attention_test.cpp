// GPU tests of causal attention against the CPU fp32 backend: forward (out and the logsumexp
// statistics) and backward (dqkv), through cuDNN's fused SDPA when this build has it and through
// our fallback kernels, for sequence lengths that are not multiples of 64 and head sizes 64 and
// 128; and the fallback in an f32 backend, where it must agree to f32 precision.
#include <cstdio>

#include "cuda_test_util.h"

namespace trainer {
namespace cuda_testing {
namespace {

struct AttentionCase {
  int B, T, NH, HS;
};

struct AttentionResult {
  std::vector<float> out, stats, dqkv;
};

class CudaAttentionFixture : public CudaVsCpuTest {
 protected:
  // Forward then backward (from the backend's own out and stats, as in training).
  void RunGpu(CudaBackend* gpu, const AttentionCase& c, const std::vector<float>& qkv,
              const std::vector<float>& dout, AttentionResult* r) {
    const int64_t B = c.B, T = c.T, C = c.NH * c.HS;
    const DType dtype = gpu->compute_dtype();
    DeviceBuffer g_qkv(gpu, dtype, {B, T, 3 * C}), g_dqkv(gpu, dtype, {B, T, 3 * C});
    DeviceBuffer g_out(gpu, dtype, {B, T, C}), g_dout(gpu, dtype, {B, T, C});
    DeviceBuffer g_stats(gpu, DType::kF32, {B, c.NH, T});
    ASSERT_STATUS_OK(g_qkv.Upload(qkv));
    ASSERT_STATUS_OK(g_dout.Upload(dout));
    ASSERT_STATUS_OK(g_dqkv.Upload(std::vector<float>(B * T * 3 * C, 7.f)));  // overwritten
    ASSERT_STATUS_OK(gpu->AttentionForward(g_out.tensor(), g_stats.tensor(), g_qkv.tensor(), c.NH));
    ASSERT_STATUS_OK(gpu->AttentionBackward(g_dqkv.tensor(), g_dout.tensor(), g_qkv.tensor(),
                                            g_out.tensor(), g_stats.tensor(), c.NH));
    r->out = g_out.Download();
    r->stats = g_stats.Download();
    r->dqkv = g_dqkv.Download();
    // The forward again: bit for bit the same (the backward may add dq in another order).
    ASSERT_STATUS_OK(gpu->AttentionForward(g_out.tensor(), g_stats.tensor(), g_qkv.tensor(), c.NH));
    EXPECT_BITWISE_EQUAL(g_out.Download(), r->out);
    EXPECT_BITWISE_EQUAL(g_stats.Download(), r->stats);
  }

  void RunCpu(const AttentionCase& c, std::vector<float> qkv, std::vector<float> dout,
              AttentionResult* r) {
    const int64_t B = c.B, T = c.T, C = c.NH * c.HS;
    r->out.assign(B * T * C, 0.f);
    r->stats.assign(B * c.NH * T, 0.f);
    r->dqkv.assign(B * T * 3 * C, 0.f);
    ASSERT_STATUS_OK(cpu_->AttentionForward(HostView(r->out, {B, T, C}),
                                            HostView(r->stats, {B, c.NH, T}),
                                            HostView(qkv, {B, T, 3 * C}), c.NH));
    ASSERT_STATUS_OK(cpu_->AttentionBackward(
        HostView(r->dqkv, {B, T, 3 * C}), HostView(dout, {B, T, C}), HostView(qkv, {B, T, 3 * C}),
        HostView(r->out, {B, T, C}), HostView(r->stats, {B, c.NH, T}), c.NH));
  }
};

class CudaAttentionTest : public CudaAttentionFixture,
                          public ::testing::WithParamInterface<std::tuple<AttentionCase, bool>> {};

TEST_P(CudaAttentionTest, ForwardAndBackwardMatchCpu) {
  const AttentionCase c = std::get<0>(GetParam());
  const bool fallback = std::get<1>(GetParam());
  SCOPED_TRACE(Trace() +
               StrFormat(", B=%d T=%d NH=%d HS=%d fallback=%d", c.B, c.T, c.NH, c.HS, fallback));
  if (!fallback && !CudaBackend::CudnnAttentionCompiled())
    GTEST_SKIP() << "built without the cuDNN frontend (scripts/fetch_cudnn_frontend.sh)";
  gpu_->set_force_attention_fallback(fallback);
  const int C = c.NH * c.HS;
  const std::vector<float> qkv = Random(static_cast<size_t>(c.B) * c.T * 3 * C, -2.f, 2.f);
  const std::vector<float> dout = Random(static_cast<size_t>(c.B) * c.T * C);
  AttentionResult want, got;
  RunCpu(c, qkv, dout, &want);
  RunGpu(gpu_.get(), c, qkv, dout, &got);
  EXPECT_RELATIVE_ERROR_BELOW(got.out, want.out, 2e-2);
  EXPECT_RELATIVE_ERROR_BELOW(got.stats, want.stats, 5e-3);
  EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, want.dqkv, 3e-2);
  const CudaPathCounts& p = gpu_->path_counts();
  std::printf(
      "[attention paths] B=%d T=%d NH=%d HS=%d fallback=%d: cudnn=%d fallback=%d "
      "(out %.2e, stats %.2e, dqkv %.2e)\n",
      c.B, c.T, c.NH, c.HS, fallback, p.attention_cudnn, p.attention_fallback,
      RelativeError(got.out, want.out), RelativeError(got.stats, want.stats),
      RelativeError(got.dqkv, want.dqkv));
  if (fallback) {
    EXPECT_EQ(p.attention_cudnn, 0);
  } else {
    EXPECT_EQ(p.attention_cudnn, 3) << "cuDNN rejected a shape it should run";  // fwd, bwd, fwd
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         ::testing::Combine(::testing::Values(AttentionCase{2, 77, 3, 64},
                                                              AttentionCase{1, 130, 2, 128},
                                                              AttentionCase{3, 64, 4, 64}),
                                            ::testing::Bool()));

// The fallback kernels in f32: only the order of additions differs from the CPU reference.
TEST_F(CudaAttentionFixture, FallbackInF32MatchesCpuToF32Precision) {
  std::unique_ptr<CudaBackend> gpu32;
  ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kF32, &gpu32));
  for (const AttentionCase& c : {AttentionCase{2, 45, 2, 48}, AttentionCase{1, 70, 1, 160}}) {
    SCOPED_TRACE(Trace() + StrFormat(", B=%d T=%d NH=%d HS=%d", c.B, c.T, c.NH, c.HS));
    const int C = c.NH * c.HS;
    const std::vector<float> qkv =
        RandomFloats(static_cast<size_t>(c.B) * c.T * 3 * C, rng_, -2.f, 2.f);
    const std::vector<float> dout = RandomFloats(static_cast<size_t>(c.B) * c.T * C, rng_);
    AttentionResult want, got;
    RunCpu(c, qkv, dout, &want);
    RunGpu(gpu32.get(), c, qkv, dout, &got);
    EXPECT_RELATIVE_ERROR_BELOW(got.out, want.out, 1e-5);
    EXPECT_RELATIVE_ERROR_BELOW(got.stats, want.stats, 1e-5);
    EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, want.dqkv, 1e-4);
  }
  EXPECT_EQ(gpu32->path_counts().attention_cudnn, 0);  // cuDNN SDPA has no f32 graphs
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
