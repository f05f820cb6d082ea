// Timings of the CUDA backend's ops at GPT-2 small shapes (B=8, T=1024, C=768, 12 heads, padded
// vocabulary 50304), printed as milliseconds and TFLOP/s or GB/s. Disabled by default (it measures,
// it does not check); run with --gtest_also_run_disabled_tests --gtest_filter='*Perf*'.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>

#include "cuda_test_util.h"
#include "packing_cases.h"

namespace trainer {
namespace cuda_testing {
namespace {

class CudaPerfTest : public CudaVsCpuTest {
 protected:
  // Average milliseconds of `op` over `iterations` runs after one warm-up run.
  double Time(const std::function<Status()>& op, int iterations = 10) {
    EXPECT_TRUE(op().ok());
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, gpu_->stream());
    for (int i = 0; i < iterations; ++i) {
      const Status s = op();
      EXPECT_TRUE(s.ok()) << s.message();
    }
    cudaEventRecord(stop, gpu_->stream());
    cudaEventSynchronize(stop);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / iterations;
  }
  void Report(const char* what, double ms, double flops, double bytes) {
    std::printf("[perf] %-34s %8.3f ms", what, ms);
    if (flops > 0) std::printf("  %7.1f TFLOP/s", flops / ms / 1e9);
    if (bytes > 0) std::printf("  %7.1f GB/s", bytes / ms / 1e6);
    std::printf("\n");
  }
  std::unique_ptr<DeviceBuffer> Zeros(DType dtype, std::vector<int64_t> shape) {
    auto b = std::make_unique<DeviceBuffer>(gpu_.get(), dtype, std::move(shape));
    EXPECT_TRUE(b->status().ok()) << b->status().message();
    return b;
  }
};

TEST_F(CudaPerfTest, DISABLED_Gpt2SmallShapes) {
  const int64_t B = 8, T = 1024, C = 768, NH = 12, V = 50304, N = B * T, F = 4 * C;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  const double e2 = 2.0;  // bytes per bf16 element
  auto x = Compute(Random(N * C), {B, T, C});
  auto ln_w = Compute(Random(C), {C}), ln_b = Compute(Random(C), {C});
  auto mean = Zeros(f32, {N}), rstd = Zeros(f32, {N}), ln_out = Zeros(bf, {N, C});
  auto din = Zeros(bf, {N, C}), dln_w = Zeros(f32, {C}), dln_b = Zeros(f32, {C});
  Report("layernorm forward", Time([&] {
           return gpu_->LayerNormForward(ln_out->tensor(), mean->tensor(), rstd->tensor(),
                                         x->tensor(), ln_w->tensor(), ln_b->tensor());
         }),
         0, 2 * N * C * e2);
  Report("add+layernorm forward", Time([&] {
           return gpu_->AddLayerNormForward(din->tensor(), ln_out->tensor(), mean->tensor(),
                                            rstd->tensor(), x->tensor(), ln_out->tensor(),
                                            ln_w->tensor(), ln_b->tensor());
         }),
         0, 4 * N * C * e2);
  Report("layernorm backward", Time([&] {
           return gpu_->LayerNormBackward(din->tensor(), dln_w->tensor(), dln_b->tensor(), Tensor(),
                                          ln_out->tensor(), x->tensor(), ln_w->tensor(),
                                          mean->tensor(), rstd->tensor());
         }),
         0, 5 * N * C * e2);

  auto w_qkv = Compute(Random(3 * C * C, -0.05f, 0.05f), {3 * C, C});
  auto b_qkv = Compute(Random(3 * C), {3 * C});
  auto qkv = Zeros(bf, {B, T, 3 * C});
  Report("matmul qkv (+bias)", Time([&] {
           return gpu_->MatmulForward(qkv->tensor(), Tensor(), ln_out->tensor(), w_qkv->tensor(),
                                      b_qkv->tensor(), Activation::kNone);
         }),
         2.0 * N * C * 3 * C, 0);
  auto w_fc = Compute(Random(F * C, -0.05f, 0.05f), {F, C}), b_fc = Compute(Random(F), {F});
  auto fc = Zeros(bf, {N, F}), fc_pre = Zeros(bf, {N, F});
  auto dw_fc = Zeros(f32, {F, C}), db_fc = Zeros(f32, {F}), dfc = Compute(Random(N * F), {N, F});
  Report("matmul fc (+bias, GELU)", Time([&] {
           return gpu_->MatmulForward(fc->tensor(), fc_pre->tensor(), ln_out->tensor(),
                                      w_fc->tensor(), b_fc->tensor(), Activation::kGelu);
         }),
         2.0 * N * C * F, 0);
  Report("matmul fc backward (din,dW,db)", Time([&] {
           return gpu_->MatmulBackward(din->tensor(), dw_fc->tensor(), db_fc->tensor(),
                                       dfc->tensor(), ln_out->tensor(), w_fc->tensor(),
                                       GradientWrite::kAccumulate);
         }),
         4.0 * N * C * F, 0);
  Report("gelu backward",
         Time([&] { return gpu_->GeluBackward(dfc->tensor(), dfc->tensor(), fc_pre->tensor()); }),
         0, 3 * N * F * e2);

  auto att = Zeros(bf, {B, T, C}), stats = Zeros(f32, {B, NH, T});
  auto datt = Compute(Random(N * C), {B, T, C}), dqkv = Zeros(bf, {B, T, 3 * C});
  ASSERT_STATUS_OK(qkv->Upload(Random(N * 3 * C)));
  const double att_flops = 4.0 * B * NH * T * T * (C / NH) / 2;  // causal: half the scores
  for (bool fallback : {false, true}) {
    gpu_->set_force_attention_fallback(fallback);
    Report(fallback ? "attention forward (fallback)" : "attention forward (cuDNN)",
           Time(
               [&] {
                 return gpu_->AttentionForward(att->tensor(), stats->tensor(), qkv->tensor(), NH);
               },
               fallback ? 2 : 10),
           att_flops, 0);
    Report(fallback ? "attention backward (fallback)" : "attention backward (cuDNN)",
           Time(
               [&] {
                 return gpu_->AttentionBackward(dqkv->tensor(), datt->tensor(), qkv->tensor(),
                                                att->tensor(), stats->tensor(), NH);
               },
               fallback ? 2 : 10),
           2.5 * att_flops, 0);
  }

  auto wte = Compute(Random(V * C, -0.05f, 0.05f), {V, C});
  auto logits = Zeros(bf, {N, V});
  Report("matmul lm head",
         Time(
             [&] {
               return gpu_->MatmulForward(logits->tensor(), Tensor(), ln_out->tensor(),
                                          wte->tensor(), Tensor(), Activation::kNone);
             },
             5),
         2.0 * N * C * V, 0);
  auto targets = Ints(RandomInts(N, rng_, 0, 50256), {N});
  auto row_max = Zeros(f32, {N}), sums = Zeros(f32, {2, N}), losses = Zeros(f32, {N});
  Report(
      "cross-entropy 3 passes (in place)",
      Time(
          [&] {
            TRAINER_RETURN_IF_ERROR(
                gpu_->CrossEntropyRowMax(row_max->tensor(), logits->tensor(), 0, 50257));
            TRAINER_RETURN_IF_ERROR(gpu_->CrossEntropySums(
                sums->tensor(), logits->tensor(), row_max->tensor(), targets->tensor(), 0, 50257));
            return gpu_->CrossEntropyBackward(losses->tensor(), logits->tensor(), logits->tensor(),
                                              row_max->tensor(), sums->tensor(), targets->tensor(),
                                              0, 50257, 1.f / N);
          },
          5),
      0, 4 * N * V * e2);
  Report("cross-entropy fused (in place)", Time([&] {
           return gpu_->CrossEntropyFused(losses->tensor(), logits->tensor(), logits->tensor(),
                                          row_max->tensor(), sums->tensor(), targets->tensor(),
                                          50257, 1.f / N);
         }),
         0, 2 * N * V * e2);

  auto tokens = Ints(RandomInts(N, rng_, 0, 50256), {B, T});
  auto wpe = Compute(Random(T * C), {T, C}), dwte = Zeros(f32, {V, C}), dwpe = Zeros(f32, {T, C});
  Report("embedding forward", Time([&] {
           return gpu_->EmbeddingForward(x->tensor(), tokens->tensor(), wte->tensor(),
                                         wpe->tensor(), 0);
         }),
         0, 3 * N * C * e2);
  Report("embedding backward", Time([&] {
           return gpu_->EmbeddingBackward(dwte->tensor(), dwpe->tensor(), x->tensor(),
                                          tokens->tensor(), 0);
         }),
         0, N * C * (e2 + 8));

  const int64_t P = 124475904;  // GPT-2 small parameters
  auto param = Zeros(bf, {P}), master = Zeros(f32, {P}), grad = Zeros(f32, {P}),
       m = Zeros(f32, {P}), v = Zeros(f32, {P});
  AdamWParams p;
  p.lr = 1e-4f;
  Report("adamw (124M params)", Time([&] {
           return gpu_->AdamW(param->tensor(), master->tensor(), grad->tensor(), m->tensor(),
                              v->tensor(), p);
         }),
         0, P * (4.0 * 7 + 2));
  auto sum = Zeros(DType::kF64, {1});
  Report("sum of squares (124M)",
         Time([&] { return gpu_->SumInto(sum->tensor(), grad->tensor(), SumOf::kSquares, false); }),
         0, P * 4.0);
}

// LayerNorm over the hidden sizes of the configs (GPT-2 124M/350M, the 1.3B), 32768 rows (the rows
// of one micro-batch of each): which path each width takes shows as its bandwidth.
TEST_F(CudaPerfTest, DISABLED_LayerNormWidths) {
  const int64_t N = 32768;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  for (int64_t C : {768, 1024, 1536, 2048}) {
    auto x = Compute(Random(N * C), {N, C}), dout = Compute(Random(N * C), {N, C});
    auto w = Compute(Random(C), {C}), b = Compute(Random(C), {C});
    auto out = Zeros(bf, {N, C}), din = Zeros(bf, {N, C});
    auto mean = Zeros(f32, {N}), rstd = Zeros(f32, {N});
    auto dw = Zeros(f32, {C}), db = Zeros(f32, {C});
    char what[64];
    std::snprintf(what, sizeof(what), "layernorm forward C=%lld", (long long)C);
    Report(what, Time([&] {
             return gpu_->LayerNormForward(out->tensor(), mean->tensor(), rstd->tensor(),
                                           x->tensor(), w->tensor(), b->tensor());
           }),
           0, 2.0 * N * C * 2);
    std::snprintf(what, sizeof(what), "layernorm backward C=%lld", (long long)C);
    Report(what, Time([&] {
             return gpu_->LayerNormBackward(din->tensor(), dw->tensor(), db->tensor(), Tensor(),
                                            dout->tensor(), x->tensor(), w->tensor(),
                                            mean->tensor(), rstd->tensor());
           }),
           0, 4.0 * N * C * 2);
    auto sums = Zeros(f32, {C});
    std::snprintf(what, sizeof(what), "layernorm backward + din sums C=%lld", (long long)C);
    Report(what, Time([&] {
             return gpu_->LayerNormBackward(din->tensor(), dw->tensor(), db->tensor(),
                                            sums->tensor(), dout->tensor(), x->tensor(),
                                            w->tensor(), mean->tensor(), rstd->tensor());
           }),
           0, 4.0 * N * C * 2);
  }
}

// Fused causal attention (cuDNN) at the configs' shapes, forward and backward, for comparison with
// PyTorch's SDPA backends on the same shapes (bench/torch_sdpa_backends.py).
TEST_F(CudaPerfTest, DISABLED_AttentionShapes) {
  struct Shape {
    const char* name;
    int64_t B, T, NH, HS;
  };
  for (const Shape& s : {Shape{"124M B=64", 64, 1024, 12, 64}, Shape{"350M B=32", 32, 1024, 16, 64},
                         Shape{"1.3B B=16", 16, 2048, 16, 128}}) {
    const int64_t C = s.NH * s.HS, N = s.B * s.T;
    auto qkv = Compute(Random(N * 3 * C), {s.B, s.T, 3 * C});
    auto out = Zeros(DType::kBF16, {s.B, s.T, C}), stats = Zeros(DType::kF32, {s.B, s.NH, s.T});
    auto dout = Compute(Random(N * C), {s.B, s.T, C});
    auto dqkv = Zeros(DType::kBF16, {s.B, s.T, 3 * C});
    const double flops = 4.0 * s.B * s.NH * s.T * s.T * s.HS / 2;  // causal: half the scores
    char what[64];
    std::snprintf(what, sizeof(what), "attention forward %s", s.name);
    Report(what, Time([&] {
             return gpu_->AttentionForward(out->tensor(), stats->tensor(), qkv->tensor(), s.NH);
           }),
           flops, 0);
    std::snprintf(what, sizeof(what), "attention backward %s", s.name);
    Report(what, Time([&] {
             return gpu_->AttentionBackward(dqkv->tensor(), dout->tensor(), qkv->tensor(),
                                            out->tensor(), stats->tensor(), s.NH);
           }),
           2.5 * flops, 0);
  }
}

// Data.packing: documents at a Llama-8B-like shape (B=2, T=4096, 32 query heads on 8 kv heads,
// HS=128) with documents of 1..2048 tokens: plain causal attention through cuDNN, the documents
// through cuDNN's variable-length batch (route attention_documents) and through our kernels (no
// measure of the documents given). FLOP/s count the plain causal scores.
TEST_F(CudaPerfTest, DISABLED_DocumentAttention) {
  const int64_t B = 2, T = 4096, NH = 32, NKV = 8, HS = 128, C = NH * HS, W = (NH + 2 * NKV) * HS;
  const testing::Packing p = testing::RandomPacking(B, T, 2048, 7);
  const DocumentShape measured = MeasureDocuments(p.doc_starts.data(), B, T);
  std::printf("[perf] %d documents, the longest %d tokens\n", measured.count, measured.longest);
  auto qkv = Compute(Random(B * T * W), {B, T, W}), dout = Compute(Random(B * T * C), {B, T, C});
  auto out = Zeros(DType::kBF16, {B, T, C}), stats = Zeros(DType::kF32, {B, NH, T});
  auto dqkv = Zeros(DType::kBF16, {B, T, W});
  auto starts = Ints(p.doc_starts, {B, T});
  const double flops = 4.0 * B * NH * T * T * HS / 2;
  struct Route {
    const char* name;
    Tensor starts;
    DocumentShape documents;
  };
  for (const Route& r : {Route{"plain causal, cuDNN", Tensor(), DocumentShape()},
                         Route{"documents, cuDNN", starts->tensor(), measured},
                         Route{"documents, ours", starts->tensor(), DocumentShape()}}) {
    char what[64];
    std::snprintf(what, sizeof(what), "forward %s", r.name);
    Report(what, Time([&] {
             return gpu_->AttentionForward(out->tensor(), stats->tensor(), qkv->tensor(), NH, NKV,
                                           DropoutKey(), r.starts, r.documents);
           }),
           flops, 0);
    std::snprintf(what, sizeof(what), "backward %s", r.name);
    Report(what, Time([&] {
             return gpu_->AttentionBackward(dqkv->tensor(), dout->tensor(), qkv->tensor(),
                                            out->tensor(), stats->tensor(), NH, NKV, DropoutKey(),
                                            r.starts, r.documents);
           }),
           2.5 * flops, 0);
  }
  EXPECT_GT(gpu_->path_counts().attention_cudnn_documents, 0);
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
