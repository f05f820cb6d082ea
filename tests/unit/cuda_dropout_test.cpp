// GPU tests of dropout against the CPU twins: the hidden-state dropout kernel draws the CPU's
// Philox mask exactly (the same elements dropped, the kept ones scaled alike, with and without
// the fused residual add, in bf16 and f32; a LoRA adapter's input mask, drawn by global column
// from a column block); the fallback attention kernels drop the CPU's
// attention probabilities; cuDNN's fused attention dropout (its own mask) is the same for the
// same key, another for another step, and unbiased: its mean over many draws is the attention
// without dropout.
#include "cuda_test_util.h"

namespace trainer {
namespace cuda_testing {
namespace {

class CudaDropoutTest : public CudaVsCpuTest {};

DropoutKey Key(float p) {
  DropoutKey k;
  k.p = p;
  k.seed = 1234;
  k.step = 9;
  k.first_sample = 6;
  k.seq_len = 13;
  k.first_row = 13;  // a row block, as under sequence parallelism
  k.layer = 2;
  k.kind = kDropoutAttnOut;
  return k;
}

TEST_F(CudaDropoutTest, HiddenMaskEqualsCpu) {
  const int64_t N = 5 * 13, C = 390;  // C not a multiple of 8: the partial last group
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    std::unique_ptr<CudaBackend> gpu;
    ASSERT_STATUS_OK(CudaBackend::Create(0, dtype, &gpu));
    for (int variant = 0; variant < 3; ++variant) {
      const bool residual = variant == 1, lora = variant == 2;
      SCOPED_TRACE(Trace() + StrFormat(", %s, residual %d, lora %d", DTypeName(dtype), residual,
                                       lora));
      DropoutKey key = Key(0.3f);
      if (lora) {  // Model.lora_dropout of a row-parallel adapter's input block (o_proj, slot 3)
        key.kind = kDropoutLora + 3;
        key.first_column = 7;
      }
      std::vector<float> in = Rounded(RandomFloats(N * C, rng_, 0.5f, 2.f), dtype);
      std::vector<float> res = Rounded(RandomFloats(N * C, rng_), dtype), want(N * C);
      ASSERT_STATUS_OK(cpu_->Dropout(HostView(want, {N, C}), HostView(in, {N, C}),
                                     residual ? HostView(res, {N, C}) : Tensor(), key));
      DeviceBuffer g_in(gpu.get(), dtype, {N, C}), g_res(gpu.get(), dtype, {N, C});
      DeviceBuffer g_out(gpu.get(), dtype, {N, C});
      ASSERT_STATUS_OK(g_in.Upload(in));
      ASSERT_STATUS_OK(g_res.Upload(res));
      ASSERT_STATUS_OK(
          gpu->Dropout(g_out.tensor(), g_in.tensor(), residual ? g_res.tensor() : Tensor(), key));
      const std::vector<float> got = g_out.Download();
      ASSERT_EQ(got.size(), want.size());
      int64_t dropped = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const float kept = want[i] - (residual ? res[i] : 0.f);  // 0 where the CPU dropped
        const bool cpu_dropped = residual ? kept == 0.f : want[i] == 0.f;
        const float got_kept = got[i] - (residual ? res[i] : 0.f);
        if (!residual) {
          ASSERT_EQ(got[i] == 0.f, cpu_dropped) << "element " << i;
        }
        dropped += cpu_dropped;
        // bf16 rounds once (at most half an ulp, 2^-9 relative); f32 alike up to the add's order.
        const float tolerance = (dtype == DType::kBF16 ? 8e-3f : 1e-6f) *
                                (std::fabs(want[i]) + (residual ? std::fabs(res[i]) : 0.f));
        ASSERT_NEAR(got[i], want[i], tolerance) << "element " << i << " kept " << got_kept;
      }
      EXPECT_GT(dropped, N * C / 5);
      EXPECT_LT(dropped, N * C * 2 / 5);
    }
  }
}

// qkv (B,T,3C) attention forward and backward on a backend with a dropout key.
struct Attention {
  std::vector<float> out, dqkv;
};
Attention RunAttention(Backend* be, int B, int T, int NH, int HS, const std::vector<float>& qkv,
                       const std::vector<float>& dout, const DropoutKey& key) {
  const int64_t C = NH * HS;
  const DType dt = be->compute_dtype();
  DeviceBuffer g_qkv(be, dt, {B, T, 3 * C}), g_dqkv(be, dt, {B, T, 3 * C});
  DeviceBuffer g_out(be, dt, {B, T, C}), g_dout(be, dt, {B, T, C}), g_stats(be, DType::kF32, {B, NH, T});
  EXPECT_TRUE(g_qkv.Upload(qkv).ok());
  EXPECT_TRUE(g_dout.Upload(dout).ok());
  EXPECT_TRUE(be->AttentionForward(g_out.tensor(), g_stats.tensor(), g_qkv.tensor(), NH, 0, key).ok());
  EXPECT_TRUE(be->AttentionBackward(g_dqkv.tensor(), g_dout.tensor(), g_qkv.tensor(),
                                    g_out.tensor(), g_stats.tensor(), NH, 0, key)
                  .ok());
  return Attention{g_out.Download(), g_dqkv.Download()};
}

TEST_F(CudaDropoutTest, FallbackAttentionDropsTheCpuMask) {
  const int B = 2, T = 45, NH = 3, HS = 16, C = NH * HS;
  std::unique_ptr<CudaBackend> gpu32;
  ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kF32, &gpu32));
  DropoutKey key = Key(0.2f);
  key.kind = kDropoutAttnProbs;
  key.first_row = 0;
  key.first_head = 3;
  const std::vector<float> qkv = RandomFloats(B * T * 3 * C, rng_, -2.f, 2.f);
  const std::vector<float> dout = RandomFloats(B * T * C, rng_);
  std::vector<float> q = qkv, d = dout, out(B * T * C), stats(B * NH * T), dqkv(qkv.size());
  ASSERT_STATUS_OK(cpu_->AttentionForward(HostView(out, {B, T, C}), HostView(stats, {B, NH, T}),
                                          HostView(q, {B, T, 3 * C}), NH, 0, key));
  ASSERT_STATUS_OK(cpu_->AttentionBackward(HostView(dqkv, {B, T, 3 * C}), HostView(d, {B, T, C}),
                                           HostView(q, {B, T, 3 * C}), HostView(out, {B, T, C}),
                                           HostView(stats, {B, NH, T}), NH, 0, key));
  const Attention got = RunAttention(gpu32.get(), B, T, NH, HS, qkv, dout, key);
  SCOPED_TRACE(Trace());
  EXPECT_RELATIVE_ERROR_BELOW(got.out, out, 1e-5);
  EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, dqkv, 1e-4);
  EXPECT_EQ(gpu32->path_counts().attention_cudnn, 0);
}

TEST_F(CudaDropoutTest, CudnnAttentionDropoutIsKeyedAndUnbiased) {
  if (!CudaBackend::CudnnAttentionCompiled()) GTEST_SKIP() << "built without the cuDNN frontend";
  const int B = 2, T = 64, NH = 2, HS = 64, C = NH * HS;
  DropoutKey key = Key(0.25f);
  key.kind = kDropoutAttnProbs;
  key.first_row = 0;
  const std::vector<float> qkv = Random(B * T * 3 * C, -1.f, 1.f), dout = Random(B * T * C);
  const Attention first = RunAttention(gpu_.get(), B, T, NH, HS, qkv, dout, key);
  ASSERT_GT(gpu_->path_counts().attention_cudnn, 0) << "cuDNN rejected attention dropout";
  const Attention again = RunAttention(gpu_.get(), B, T, NH, HS, qkv, dout, key);
  EXPECT_BITWISE_EQUAL(again.out, first.out) << "the same key drew another mask";
  EXPECT_BITWISE_EQUAL(again.dqkv, first.dqkv) << "the same key drew another mask";
  const Attention plain = RunAttention(gpu_.get(), B, T, NH, HS, qkv, dout, DropoutKey());
  EXPECT_GT(RelativeError(first.out, plain.out), 0.05) << "no visible dropout";
  // The mean over many steps' masks is the attention without dropout.
  std::vector<double> sum(plain.out.size(), 0.0);
  const int draws = 200;
  for (int step = 0; step < draws; ++step) {
    key.step = 100 + step;
    const Attention a = RunAttention(gpu_.get(), B, T, NH, HS, qkv, dout, key);
    if (step == 0) {
      EXPECT_GT(RelativeError(a.out, first.out), 0.05) << "another step, same mask";
    }
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += a.out[i];
  }
  std::vector<float> mean(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) mean[i] = static_cast<float>(sum[i] / draws);
  SCOPED_TRACE(Trace());
  EXPECT_RELATIVE_ERROR_BELOW(mean, plain.out, 0.08);
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
