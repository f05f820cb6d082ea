// Data.packing: documents on the whole model stage (CPU fp32): three documents of different
// lengths packed into one sample give each document the loss it has alone (at the start of a
// window of its own, where plain causal attention and positions from 0 are exactly "alone"),
// and the packed sample's gradients equal the sum of the three documents' gradients. Without
// the document starts the packed losses differ (the test can fail). With recomputation too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model/gpt.h"
#include "model_test_util.h"

namespace trainer {
namespace {

constexpr int kT = 24;
const int kLengths[3] = {7, 9, 8};  // summing to kT

struct Packed {
  ModelConfig config;
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  std::unique_ptr<GptModel> model;
  std::vector<int32_t> tokens, targets, starts;  // the packed sample (1, kT)
  int first[3] = {0, 7, 16};                      // each document's start

  explicit Packed(const std::string& recompute) {
    config = TinyLlama(true, false, true);
    config.max_seq_len = kT;
    config.recompute = recompute;
    ModelPartition part;
    part.num_layers = config.num_layers;
    EXPECT_TRUE(GptModel::Create(config, part, backend.get(), nullptr, 1, kT, 1, &model).ok());
    EXPECT_TRUE(model->SetParameters(InitialParameterValues(config, part, model->parameters(), 5))
                    .ok());
    std::mt19937 rng(11);
    RandomTokens(kT, config.vocab_size, &rng, &tokens, &targets);
    for (int d = 0; d < 3; ++d)
      for (int t = 0; t < kLengths[d]; ++t) starts.push_back(first[d]);
  }

  // Loss sum (and, with `gradients`, the gradient buffer after Backward with dloss_scale 1) of
  // `in` with targets `out` (-1: ignored) and document starts `doc_starts` (null: none).
  double Run(const std::vector<int32_t>& in, const std::vector<int32_t>& out,
             const int32_t* doc_starts, std::vector<float>* gradients = nullptr) {
    EXPECT_TRUE(model->ZeroGradients().ok());
    EXPECT_TRUE(model->SetDocumentStarts(0, doc_starts).ok());
    EXPECT_TRUE(model->Forward(0, in.data(), out.data(), true, gradients ? 1.f : 0.f).ok());
    double sum = 0;
    EXPECT_TRUE(model->AccumulateLoss(true).ok());
    EXPECT_TRUE(model->LossSum(&sum).ok());
    if (gradients != nullptr) {
      EXPECT_TRUE(model->Backward(0).ok());
      const Tensor g = model->gradient_buffer();
      gradients->resize(g.numel());
      EXPECT_TRUE(backend->CopyToHost(gradients->data(), g.data, g.bytes()).ok());
    }
    return sum;
  }

  // Document d's targets in the packed sample, -1 elsewhere.
  std::vector<int32_t> TargetsOf(int d) const {
    std::vector<int32_t> out(kT, -1);
    std::copy(targets.begin() + first[d], targets.begin() + first[d] + kLengths[d],
              out.begin() + first[d]);
    return out;
  }

  // Document d alone: its tokens and targets at the start of a window, the rest of the window
  // other tokens whose targets are ignored.
  void Alone(int d, std::vector<int32_t>* in, std::vector<int32_t>* out) const {
    in->assign(kT, 1);
    out->assign(kT, -1);
    for (int t = 0; t < kLengths[d]; ++t) {
      (*in)[t] = tokens[first[d] + t];
      (*out)[t] = targets[first[d] + t];
    }
    for (int t = kLengths[d]; t < kT; ++t) (*in)[t] = (t * 7) % config.vocab_size;
  }
};

class Packing : public ::testing::TestWithParam<const char*> {};

TEST_P(Packing, EachDocumentHasTheLossAndGradientsItHasAlone) {
  Packed p(GetParam());
  std::vector<float> sum_alone, g;
  for (int d = 0; d < 3; ++d) {
    std::vector<int32_t> in, out;
    p.Alone(d, &in, &out);
    const double alone = p.Run(in, out, nullptr, &g);
    if (d == 0) sum_alone.assign(g.size(), 0.f);
    for (size_t i = 0; i < g.size(); ++i) sum_alone[i] += g[i];
    const double packed = p.Run(p.tokens, p.TargetsOf(d), p.starts.data());
    EXPECT_NEAR(packed, alone, 1e-5 * std::fabs(alone)) << "document " << d;
    // Without the document starts the later documents see the earlier ones: 10x the tolerance.
    const double mixed = p.Run(p.tokens, p.TargetsOf(d), nullptr);
    if (d > 0) {
      EXPECT_GT(std::fabs(mixed - alone), 1e-4 * std::fabs(alone)) << "document " << d;
    }
  }
  std::vector<float> packed_g;
  p.Run(p.tokens, p.targets, p.starts.data(), &packed_g);
  ASSERT_EQ(packed_g.size(), sum_alone.size());
  float scale = 0.f;
  for (float v : sum_alone) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < packed_g.size(); ++i)
    ASSERT_NEAR(packed_g[i], sum_alone[i], 2e-5f * scale) << "gradient element " << i;
}

INSTANTIATE_TEST_SUITE_P(Recompute, Packing, ::testing::Values("none", "block"));

}  // namespace
}  // namespace trainer
