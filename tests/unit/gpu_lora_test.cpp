// LoRA on the GPU (bf16, the base frozen in bf16) against the CPU fp32 path: the same base weights
// and adapters (bf16-rounded, B not zero so that every adapter path carries a gradient), the same
// tokens; the loss and every adapter's gradient must agree within bf16 tolerance, for a llama
// (GQA, every linear adapted: q, k and v as column blocks of the fused qkv, gate and up of the
// fused MLP input) and a GPT-2 (c_attn, c_proj, c_fc). Also recomputation on the GPU, and the
// frozen base read back unchanged after a step; Model.lora_dropout (the GPU draws the CPU's
// masks); and, for the llama, Data.packing: documents (attention and RoPE inside documents).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gpu_model_test_util.h"
#include "model/gpt.h"
#include "model_test_util.h"

namespace trainer {
namespace {

// The GPU model tests' GPT-2 shape (odd T, vocabulary 1000, head size 64) with adapters on
// c_attn, c_proj and c_fc.
ModelConfig LoraGpt2() {
  return WithLora(ModelOfSize(1000, 128, 2, 2, 128), 8, 16, "all");  // vocabulary padded to 1024
}

// A llama of that size: GQA (2 heads on 1), SwiGLU of 224, untied; every linear adapted.
ModelConfig LoraLlama() {
  ModelConfig m = LoraGpt2();
  m.arch = "llama";
  m.num_kv_heads = 1;
  m.head_dim = 64;
  m.ffn_hidden_size = 224;
  m.norm_eps = 1e-6;
  m.tie_embeddings = false;
  return m;
}

std::vector<float> RandomBf16(size_t n, float sd, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = BF16ToFloat(FloatToBF16(normal(*rng)));
  return v;
}

// A model's bf16-representable base weights and adapters, and a micro-batch of B x T tokens.
struct LoraInputs {
  static constexpr int B = 2, T = 77;
  ModelConfig config;
  std::vector<float> base, adapters;
  std::vector<int32_t> tokens, targets;

  explicit LoraInputs(bool llama) : config(llama ? LoraLlama() : LoraGpt2()) {
    ModelPartition part;
    part.num_layers = config.num_layers;
    std::mt19937 rng(5);
    base = InitialParameterValues(config, part, BuildFrozenParameterList(config, part), 5);
    for (float& p : base) p = BF16ToFloat(FloatToBF16(p));
    adapters = RandomBf16(TotalLocalElements(BuildParameterList(config, part)), 0.05f, &rng);
    RandomTokens(B * T, config.vocab_size, &rng, &tokens, &targets);
  }
  PassResult Run(Backend* backend, const ModelConfig& c, const DropoutDraw& draw = DropoutDraw(),
                 const int32_t* doc_starts = nullptr) const {
    return ForwardBackward(backend, c, adapters, tokens, targets, B, T, base, draw, doc_starts);
  }
  // Every adapter has a gradient, within `tolerance` of the reference's.
  void Expect(const PassResult& got, const PassResult& want, double loss_tolerance,
              double tolerance) const {
    ModelPartition part;
    part.num_layers = config.num_layers;
    EXPECT_NEAR(got.loss, want.loss, loss_tolerance * want.loss);
    ExpectParameterGradientsNear(BuildParameterList(config, part), got, want, tolerance, true);
  }
};

class GpuLora : public ::testing::TestWithParam<bool> {};

TEST_P(GpuLora, LossAndAdapterGradientsMatchTheCpuPath) {
  const LoraInputs in(GetParam());
  std::unique_ptr<Backend> cpu = MakeCpuBackend(), gpu;
  ASSERT_TRUE(MakeCudaBackend(0, &gpu).ok());
  const PassResult got = in.Run(gpu.get(), in.config);
  in.Expect(got, in.Run(cpu.get(), in.config), 1e-2, 5e-2);
  EXPECT_EQ(got.base_after, in.base);  // bf16 values: stored exactly, untouched by the pass
}

TEST_P(GpuLora, RecomputationMatchesKeepingActivations) {
  const LoraInputs in(GetParam());
  std::unique_ptr<Backend> gpu;
  ASSERT_TRUE(MakeCudaBackend(0, &gpu).ok());
  const PassResult want = in.Run(gpu.get(), in.config);
  for (const char* mode : {"selective", "block"}) {
    SCOPED_TRACE(mode);
    ModelConfig config = in.config;
    config.recompute = mode;
    in.Expect(in.Run(gpu.get(), config), want, 1e-5, 1e-2);
  }
}

// Model.lora_dropout: the adapters' input masks are the CPU's (dropout.cu draws philox.h's bits).
TEST_P(GpuLora, LoraDropoutMatchesTheCpuPath) {
  const LoraInputs in(GetParam());
  std::unique_ptr<Backend> cpu = MakeCpuBackend(), gpu;
  ASSERT_TRUE(MakeCudaBackend(0, &gpu).ok());
  ModelConfig config = in.config;
  config.lora_dropout = 0.2;
  const DropoutDraw draw = TrainingDraw();
  const PassResult want = in.Run(cpu.get(), config, draw);
  in.Expect(in.Run(gpu.get(), config, draw), want, 1e-2, 5e-2);
  const PassResult plain = in.Run(cpu.get(), in.config);
  EXPECT_GT(std::fabs(plain.loss - want.loss), 1e-5 * want.loss) << "the masks change the loss";
}

// Data.packing: documents on the llama: sample 0 holds documents at 0, 30, 31 (one token) and
// 60; sample 1 starts mid-document, then one at 50. Attention over the documents (cuDNN's fused
// variable-length batch where it runs, else our kernels) and RoPE with per-token positions,
// against the CPU.
TEST_P(GpuLora, PackedDocumentsMatchTheCpuPath) {
  if (!GetParam()) GTEST_SKIP() << "GPT-2's learned positions: Data.packing is llama-only";
  const LoraInputs in(GetParam());
  std::unique_ptr<Backend> cpu = MakeCpuBackend(), gpu;
  ASSERT_TRUE(MakeCudaBackend(0, &gpu).ok());
  std::vector<int32_t> starts;
  for (int t = 0; t < in.T; ++t) starts.push_back(t < 30 ? 0 : t < 31 ? 30 : t < 60 ? 31 : 60);
  for (int t = 0; t < in.T; ++t) starts.push_back(t < 50 ? 0 : 50);
  const PassResult want = in.Run(cpu.get(), in.config, DropoutDraw(), starts.data());
  in.Expect(in.Run(gpu.get(), in.config, DropoutDraw(), starts.data()), want, 1e-2, 5e-2);
  const PassResult plain = in.Run(cpu.get(), in.config);
  EXPECT_GT(std::fabs(plain.loss - want.loss), 1e-5 * want.loss) << "the documents matter";
}

INSTANTIATE_TEST_SUITE_P(Architectures, GpuLora, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "llama" : "gpt2"; });

}  // namespace
}  // namespace trainer
