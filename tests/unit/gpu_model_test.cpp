// The whole GPT on the GPU against the CPU fp32 path: the same parameters (bf16-rounded), the same
// tokens; the loss and every parameter's gradient must agree within bf16 tolerance. Odd sizes:
// T not a multiple of 64, vocabulary not a multiple of 128, head size 64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/gpt.h"

namespace trainer {
namespace {

struct PassResult {
  double loss = 0;
  std::vector<float> grads;
};

PassResult ForwardBackward(Backend* backend, const ModelConfig& config,
                           const std::vector<float>& params, const std::vector<int32_t>& tokens,
                           const std::vector<int32_t>& targets, int B, int T) {
  ModelPartition part;
  part.num_layers = config.num_layers;
  std::unique_ptr<GptModel> model;
  EXPECT_TRUE(GptModel::Create(config, part, backend, nullptr, B, T, 1, &model).ok());
  EXPECT_TRUE(model->SetParameters(params).ok());
  EXPECT_TRUE(model->ZeroGradients().ok());
  EXPECT_TRUE(model->Forward(0, tokens.data(), targets.data(), true, 1.f / (B * T)).ok());
  PassResult run;
  EXPECT_TRUE(model->LossSum(&run.loss).ok());
  run.loss /= B * T;
  EXPECT_TRUE(model->Backward(0).ok());
  run.grads.resize(params.size());
  Tensor g = model->gradient_buffer();
  EXPECT_TRUE(backend->CopyToHost(run.grads.data(), g.data, g.bytes()).ok());
  return run;
}

TEST(GpuModel, LossAndEveryGradientMatchTheCpuPath) {
  ModelConfig config;
  config.vocab_size = 1000;  // padded to 1024
  config.hidden_size = 128;
  config.num_heads = 2;  // head size 64
  config.num_layers = 2;
  config.max_seq_len = 128;
  const int B = 2, T = 77;
  ModelPartition part;
  part.num_layers = config.num_layers;
  std::vector<float> params =
      InitialParameterValues(config, part, BuildParameterList(config, part), 5);
  for (float& p : params) p = BF16ToFloat(FloatToBF16(p));  // both paths see the same values
  std::mt19937 rng(9);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % config.vocab_size);
    targets[i] = static_cast<int32_t>(rng() % config.vocab_size);
  }
  std::unique_ptr<Backend> cpu = MakeCpuBackend(), gpu;
  ASSERT_TRUE(MakeCudaBackend(0, &gpu).ok());
  const PassResult want = ForwardBackward(cpu.get(), config, params, tokens, targets, B, T);
  const PassResult got = ForwardBackward(gpu.get(), config, params, tokens, targets, B, T);
  EXPECT_NEAR(got.loss, want.loss, 1e-2 * want.loss);
  for (const ParameterInfo& p : BuildParameterList(config, part)) {
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < p.local_numel(); ++i) {
      const double w = want.grads[p.offset + i], g = got.grads[p.offset + i];
      diff += (g - w) * (g - w);
      norm += w * w;
    }
    if (norm == 0) continue;
    // The key bias has a true gradient of zero (softmax ignores it): only rounding noise.
    if (p.name.find("c_attn.bias") != std::string::npos) continue;
    EXPECT_LT(std::sqrt(diff / norm), 5e-2) << p.name;
  }
}

}  // namespace
}  // namespace trainer
