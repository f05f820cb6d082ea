// GPU tests of causal attention against the CPU fp32 backend: forward (out and the logsumexp
// statistics) and backward (dqkv), through cuDNN's fused SDPA when this build has it and through
// our fallback kernels, for sequence lengths that are not multiples of 64 and head sizes 64 and
// 128; and the fallback in an f32 backend, where it must agree to f32 precision. Data.packing:
// documents (doc_starts): without the host's measure of them our kernels (never cuDNN) against
// the CPU's, in bf16 and in f32; with it (cuda_attention_documents_test.cpp) cuDNN's ragged
// batch.
#include <cstdio>

#include "cuda_attention_fixture.h"

namespace trainer {
namespace cuda_testing {
namespace {

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

// Data.packing: documents: sample 0 holds documents at 0, 20, 21 (one token) and 50; sample 1
// starts mid-document, then one at 40. Our kernels run even where cuDNN is routed; bf16 to bf16
// precision, f32 to f32 precision.
TEST_F(CudaAttentionFixture, DocumentsMatchCpu) {
  const AttentionCase c{2, 77, 3, 64};
  std::vector<int32_t> starts;
  for (int t = 0; t < c.T; ++t) starts.push_back(t < 20 ? 0 : t < 21 ? 20 : t < 50 ? 21 : 50);
  for (int t = 0; t < c.T; ++t) starts.push_back(t < 40 ? 0 : 40);
  std::unique_ptr<CudaBackend> gpu32;
  ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kF32, &gpu32));
  const int C = c.NH * c.HS;
  const std::vector<float> qkv = RandomFloats(static_cast<size_t>(c.B) * c.T * 3 * C, rng_, -2.f,
                                              2.f);
  const std::vector<float> dout = RandomFloats(static_cast<size_t>(c.B) * c.T * C, rng_);
  AttentionResult want, plain, got, got32;
  RunCpu(c, qkv, dout, &want, starts);
  RunCpu(c, qkv, dout, &plain);
  EXPECT_GT(RelativeError(plain.out, want.out), 1e-1) << "the documents change the result";
  RunGpu(gpu_.get(), c, qkv, dout, &got, starts);
  EXPECT_RELATIVE_ERROR_BELOW(got.out, want.out, 2e-2);
  EXPECT_RELATIVE_ERROR_BELOW(got.stats, want.stats, 5e-3);
  EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, want.dqkv, 3e-2);
  EXPECT_EQ(gpu_->path_counts().attention_cudnn, 0);
  RunGpu(gpu32.get(), c, qkv, dout, &got32, starts);
  EXPECT_RELATIVE_ERROR_BELOW(got32.out, want.out, 1e-5);
  EXPECT_RELATIVE_ERROR_BELOW(got32.stats, want.stats, 1e-5);
  EXPECT_RELATIVE_ERROR_BELOW(got32.dqkv, want.dqkv, 1e-4);
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
