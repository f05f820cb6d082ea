// Training steps of a tiny model with the AdamW offloaded or not, for the offload tests on the
// CPU (adamw_offload_test) and the GPU (gpu_offload_test).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model_test_util.h"
#include "optimizer/adamw.h"

namespace trainer {

// What a run leaves: the master weights, both moments and the model's weights.
struct OffloadRun {
  std::vector<float> master, m, v, weights;
};

// `steps` AdamW steps of a tiny model, clipped by a fixed scale, with weight decay (so that the
// decayed and non-decayed spans differ), from the gradients of a forward and backward pass on
// random tokens, or with given_gradients from random gradients written into the model's
// gradient buffer (the same for every run: no kernel choice between runs can change them).
// offload_chunk 0: no offload.
// store_param_remainders: Optimizer.store_param_remainders (it applies unsharded, not offloaded,
// with bf16 weights).
inline OffloadRun TrainTiny(const ModelConfig& config, std::unique_ptr<Backend> backend,
                            size_t offload_chunk, bool given_gradients = false, int steps = 3,
                            bool store_param_remainders = true) {
  const int B = 2, T = 7;
  ModelPartition part;
  part.num_layers = config.num_layers;
  std::unique_ptr<GptModel> model;
  EXPECT_TRUE(GptModel::Create(config, part, backend.get(), nullptr, B, T, 1, &model).ok());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 0.3f);
  std::vector<float> init(TotalLocalElements(model->parameters()));
  for (float& x : init) x = normal(rng);
  OptimizerConfig oc;
  oc.weight_decay = 0.1;
  oc.store_param_remainders = store_param_remainders;
  std::unique_ptr<AdamW> opt;
  EXPECT_TRUE(AdamW::Create(model.get(), oc, nullptr, &opt, offload_chunk > 0,
                            offload_chunk > 0 ? offload_chunk : AdamW::kOffloadChunkElements)
                  .ok());
  EXPECT_TRUE(opt->SetMaster(init).ok());
  for (int step = 1; step <= steps; ++step) {
    if (given_gradients) {
      const Tensor g = model->gradient_buffer();
      std::vector<float> grads(static_cast<size_t>(g.numel()));
      for (float& x : grads) x = 0.1f * normal(rng);
      EXPECT_TRUE(backend->CopyToDevice(g.data, grads.data(), g.bytes()).ok());
    } else {
      std::vector<int32_t> tokens, targets;
      RandomTokens(B * T, config.vocab_size, &rng, &tokens, &targets);
      EXPECT_TRUE(model->ZeroGradients().ok());
      MeanLoss(model.get(), tokens, targets, 1.f / (B * T));
      EXPECT_TRUE(model->Backward(0).ok());
    }
    EXPECT_TRUE(opt->Step(step, 1e-2, 0.75f).ok());
    EXPECT_TRUE(backend->Synchronize().ok());  // the next forward is stream-ordered after it
  }
  OffloadRun r;
  EXPECT_TRUE(opt->Download(0, &r.master).ok());
  EXPECT_TRUE(opt->Download(1, &r.m).ok());
  EXPECT_TRUE(opt->Download(2, &r.v).ok());
  const Tensor weights = model->parameter_buffer();  // f32, or bf16 (widened exactly)
  r.weights.resize(static_cast<size_t>(weights.numel()));
  if (weights.dtype == DType::kF32) {
    EXPECT_TRUE(backend->CopyToHost(r.weights.data(), weights.data, weights.bytes()).ok());
  } else {
    std::vector<uint16_t> bf16(r.weights.size());
    EXPECT_TRUE(backend->CopyToHost(bf16.data(), weights.data, weights.bytes()).ok());
    for (size_t i = 0; i < bf16.size(); ++i) r.weights[i] = BF16ToFloat(bf16[i]);
  }
  return r;
}

inline void ExpectBitIdentical(const OffloadRun& a, const OffloadRun& b, const std::string& what) {
  EXPECT_EQ(a.master, b.master) << what << ": master weights";
  EXPECT_EQ(a.m, b.m) << what << ": first moments";
  EXPECT_EQ(a.v, b.v) << what << ": second moments";
  EXPECT_EQ(a.weights, b.weights) << what << ": model weights";
}

}  // namespace trainer
