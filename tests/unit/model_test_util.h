// Tiny model configs of the CPU model tests (model_test, lora_test).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace trainer {

// A GPT-2 of these sizes.
inline ModelConfig ModelOfSize(int vocab, int hidden, int heads, int layers, int max_seq_len) {
  ModelConfig m;
  m.vocab_size = vocab;
  m.hidden_size = hidden;
  m.num_heads = heads;
  m.num_layers = layers;
  m.max_seq_len = max_seq_len;
  return m;
}

inline ModelConfig TinyModel() {
  ModelConfig m = ModelOfSize(61, 16, 2, 2, 8);  // 61: pad columns must be masked
  m.vocab_pad_multiple = 16;
  return m;
}

// The llama family: GQA (4 query heads on 2 kv heads) with head_dim 6 != hidden/heads, SwiGLU.
inline ModelConfig TinyLlama(bool qk_norm, bool qkv_bias, bool tied) {
  ModelConfig m = TinyModel();
  m.arch = "llama";
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 6;
  m.ffn_hidden_size = 24;
  m.norm_eps = 1e-6;
  m.rope_theta = 100.0;  // short wavelengths, so that positions matter within 8 tokens
  m.qk_norm = qk_norm;
  m.qkv_bias = qkv_bias;
  m.tie_embeddings = tied;
  if (qkv_bias) {  // llama3 frequency scaling with a short original context
    m.rope_scaling = "llama3";
    m.rope_factor = 4.0;
    m.rope_original_max_positions = 8;
  }
  return m;
}

// A parameterised test's case: a name and a model.
struct ModelCase {
  const char* name;
  ModelConfig config;
};
inline std::ostream& operator<<(std::ostream& os, const ModelCase& c) {
  return os << c.name;
}

// `m` with LoRA adapters of rank `rank` on `targets` (Model.lora_*).
inline ModelConfig WithLora(ModelConfig m, int rank, double alpha, const std::string& targets) {
  m.lora_rank = rank;
  m.lora_alpha = alpha;
  m.lora_targets = targets;
  return m;
}

// The masks of a training micro-batch (a fixed key: step 3, samples 4.. of the global batch).
inline DropoutDraw TrainingDraw() {
  DropoutDraw d;
  d.on = true;
  d.seed = 99;
  d.step = 3;
  d.first_sample = 4;
  return d;
}

// n random tokens and targets below `vocab`.
inline void RandomTokens(int n, int vocab, std::mt19937* rng, std::vector<int32_t>* tokens,
                         std::vector<int32_t>* targets) {
  for (int i = 0; i < n; ++i) {
    tokens->push_back(static_cast<int32_t>((*rng)() % vocab));
    targets->push_back(static_cast<int32_t>((*rng)() % vocab));
  }
}

// Mean loss over the n tokens of one micro-batch (double accumulation of the per-token f32
// losses); with dloss_scale != 0 the logits gradient is made, ready for Backward.
inline double MeanLoss(GptModel* model, const std::vector<int32_t>& tokens,
                       const std::vector<int32_t>& targets, float dloss_scale = 0.f) {
  EXPECT_TRUE(model->Forward(0, tokens.data(), targets.data(), true, dloss_scale).ok());
  double sum = 0;
  EXPECT_TRUE(model->AccumulateLoss(true).ok());
  EXPECT_TRUE(model->LossSum(&sum).ok());
  return sum / static_cast<double>(tokens.size());
}

// The central difference of loss() in (*values)[i], each value set by set(*values), against
// `analytic`: the gradient that backward gave for it. A smaller `eps` for a more curved loss.
// Where the loss is not smooth over [-eps, eps] (a MoE router's top-k choice flips: the two
// one-sided differences part by far more than curvature explains), the check is made over a
// tenth of the interval, with a floor ten times larger for the rounding of the loss.
template <typename Set, typename Loss>
void ExpectCentralDifference(std::vector<float>* values, size_t i, float analytic, Set set,
                             Loss loss, const std::string& what, double eps = 1e-2) {
  const float saved = (*values)[i];
  const auto at = [&](double delta) {
    (*values)[i] = saved + static_cast<float>(delta);
    EXPECT_TRUE(set(*values).ok());
    return loss();
  };
  const double center = at(0.0);
  double floor = 2e-4, up = at(eps), down = at(-eps);
  if (std::fabs(up - 2 * center + down) > 0.5 * (std::fabs(up - center) + std::fabs(center - down)) &&
      std::fabs(up - 2 * center + down) > 1e-4) {
    eps /= 10, floor *= 10;
    up = at(eps), down = at(-eps);
  }
  (*values)[i] = saved;
  ASSERT_TRUE(set(*values).ok());
  const double numeric = (up - down) / (2 * eps);
  EXPECT_NEAR(analytic, numeric, floor + 2e-2 * std::fabs(numeric)) << what;
}

}  // namespace trainer
