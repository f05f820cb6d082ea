// One forward and backward of a whole model on a backend, for the GPU-against-CPU model tests
// (gpu_model_test, gpu_lora_test).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "model/gpt.h"

namespace trainer {

struct PassResult {
  double loss = 0;
  std::vector<float> grads;       // the trained parameters' gradients, in buffer order
  std::vector<float> base_after;  // LoRA: the frozen weights read back after the pass
};

// `params` the trained parameters; `frozen` the frozen ones (LoRA), or empty; `draw` the
// micro-batch's dropout draw; `doc_starts` its (B,T) document starts (Data.packing), or null.
inline PassResult ForwardBackward(Backend* backend, const ModelConfig& config,
                                  const std::vector<float>& params,
                                  const std::vector<int32_t>& tokens,
                                  const std::vector<int32_t>& targets, int B, int T,
                                  const std::vector<float>& frozen = {},
                                  const DropoutDraw& draw = DropoutDraw(),
                                  const int32_t* doc_starts = nullptr) {
  ModelPartition part;
  part.num_layers = config.num_layers;
  std::unique_ptr<GptModel> model;
  EXPECT_TRUE(GptModel::Create(config, part, backend, nullptr, B, T, 1, &model).ok());
  if (!frozen.empty()) {
    EXPECT_TRUE(model->SetFrozenParameters(frozen).ok());
  }
  EXPECT_TRUE(model->SetParameters(params).ok());
  EXPECT_TRUE(model->ZeroGradients().ok());
  model->SetDropoutDraw(0, draw);
  EXPECT_TRUE(model->SetDocumentStarts(0, doc_starts).ok());
  EXPECT_TRUE(model->Forward(0, tokens.data(), targets.data(), true, 1.f / (B * T)).ok());
  PassResult run;
  EXPECT_TRUE(model->AccumulateLoss(true).ok());
  EXPECT_TRUE(model->LossSum(&run.loss).ok());
  run.loss /= B * T;
  EXPECT_TRUE(model->Backward(0).ok());
  run.grads.resize(params.size());
  Tensor g = model->gradient_buffer();
  EXPECT_TRUE(backend->CopyToHost(run.grads.data(), g.data, run.grads.size() * 4).ok());
  if (!frozen.empty()) {
    EXPECT_TRUE(model->FrozenParameterValues(&run.base_after).ok());
  }
  return run;
}

// Each parameter's gradient against the reference, as ||got - want|| / ||want|| < tolerance
// (with `nonzero`, a parameter without gradient in the reference fails).
inline void ExpectParameterGradientsNear(const std::vector<ParameterInfo>& params,
                                         const PassResult& got, const PassResult& want,
                                         double tolerance, bool nonzero = false) {
  for (const ParameterInfo& p : params) {
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < p.local_numel(); ++i) {
      const double w = want.grads[p.offset + i], g = got.grads[p.offset + i];
      diff += (g - w) * (g - w);
      norm += w * w;
    }
    if (nonzero) {
      EXPECT_GT(norm, 0) << p.name << ": no gradient";
    }
    if (norm == 0) continue;
    const double error = std::sqrt(diff / norm);
    EXPECT_LT(error, tolerance) << p.name;
    // The margin each bound leaves, in the log, so that a bound can be tightened from a run.
    std::printf("gradient %s: relative error %.3g (bound %g)\n", p.name.c_str(), error, tolerance);
  }
}

}  // namespace trainer
