// The whole model stage on the CPU backend, for GPT-2 and the llama family's variants (grouped-
// query attention, q/k norm, qkv bias, tied and untied, llama3 RoPE scaling): initial loss close
// to ln(vocab), every parameter's gradient against central finite differences of the loss,
// recomputation bit for bit, and the parameter registry's shards reassembling the full tensors.
// The dropout cases (hidden and attention dropout, GPT-2 without biases) check the gradients
// through fixed masks (the draw's key fixes them), recomputation drawing the same masks, and
// evaluation (no draw) equal to the model without dropout.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/gpt.h"
#include "model_test_util.h"

namespace trainer {
namespace {

// A mixture of experts on the llama block: layers 0 and 2 MoE, layer 1 dense (moe_layer_freq 2),
// with load-balancing and z losses; one with Qwen2-MoE's gated shared expert, one with sigmoid
// scores, renormalised top-k, per-sequence balancing and a capacity that drops tokens.
ModelConfig TinyMoe(bool qwen2) {
  ModelConfig m = TinyLlama(false, false, true);
  m.num_layers = 3;
  m.num_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 10;
  m.moe_layer_freq = 2;
  m.moe_aux_loss_coeff = 0.01;
  m.moe_z_loss_coeff = 0.001;
  if (qwen2) {
    m.moe_shared_expert_intermediate_size = 6;
  } else {
    m.moe_router_score_function = "sigmoid";
    m.moe_norm_topk_prob = true;
    m.moe_router_load_balancing_type = "seq_aux_loss";
    m.moe_expert_capacity_factor = 1.0;
  }
  return m;
}

// OLMoE's attention: q/k norms over all heads together (Model.qk_norm_type=full), experts on
// every layer with renormalised top-k.
ModelConfig TinyOlmoe() {
  ModelConfig m = TinyLlama(true, false, false);
  m.num_kv_heads = 4;
  m.qk_norm_type = "full";
  m.num_experts = 4;
  m.moe_router_topk = 2;
  m.moe_ffn_hidden_size = 10;
  m.moe_norm_topk_prob = true;
  return m;
}

ModelConfig WithDropout(ModelConfig m, bool bias) {
  m.hidden_dropout = 0.2;
  m.attention_dropout = 0.3;
  m.bias = bias;
  return m;
}

// The LM head and loss in chunks of `tokens` rows of the B*T = 14 (gpt_head.cpp).
ModelConfig WithLossChunks(ModelConfig m, int tokens) {
  m.loss_chunk_tokens = tokens;
  return m;
}

const ModelCase kCases[] = {
    {"gpt2", TinyModel()},
    {"llama_gqa_qk_norm_untied", TinyLlama(true, false, false)},
    {"llama_qkv_bias_tied_llama3_rope", TinyLlama(false, true, true)},
    {"llama_moe_shared_expert", TinyMoe(true)},
    {"llama_moe_sigmoid_capacity", TinyMoe(false)},
    {"llama_moe_qk_norm_full", TinyOlmoe()},
    {"gpt2_dropout_no_bias", WithDropout(TinyModel(), false)},
    {"gpt2_dropout", WithDropout(TinyModel(), true)},
    {"llama_dropout_gqa", WithDropout(TinyLlama(true, false, false), false)},
    {"llama_moe_dropout", WithDropout(TinyMoe(true), false)},
    {"gpt2_tied_loss_chunks", WithLossChunks(TinyModel(), 5)},
    {"llama_untied_loss_chunks", WithLossChunks(TinyLlama(true, false, false), 4)},
};

struct Fixture {
  explicit Fixture(ModelConfig c = TinyModel()) : config(c) { Build(); }
  ModelConfig config;
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  std::unique_ptr<GptModel> model;
  std::vector<int32_t> tokens, targets;
  int B = 2, T = 7;  // T below max_seq_len and not a power of two
  std::vector<float> params;

  void Build() {
    ModelPartition part;
    part.num_layers = config.num_layers;
    EXPECT_TRUE(GptModel::Create(config, part, backend.get(), nullptr, B, T, 1, &model).ok());
    params = InitialParameterValues(config, part, model->parameters(), 7);
    EXPECT_TRUE(model->SetParameters(params).ok());
    model->SetDropoutDraw(0, TrainingDraw());
    std::mt19937 rng(3);
    RandomTokens(B * T, config.vocab_size, &rng, &tokens, &targets);
  }
  // The objective: the mean loss over the B*T tokens (double accumulation of the per-token f32
  // losses), plus the MoE layers' load-balancing and z losses (which the forward adds to their
  // stats, and to the gradient, with a non-zero dloss_scale).
  double Loss(float dloss_scale = 0.f) {
    const double moe_before = MoeLosses();
    const float scale = dloss_scale != 0.f ? dloss_scale : 1.f / (B * T);
    EXPECT_TRUE(model->Forward(0, tokens.data(), targets.data(), true, scale).ok());
    double sum = 0;
    EXPECT_TRUE(model->AccumulateLoss(true).ok());
    EXPECT_TRUE(model->LossSum(&sum).ok());
    last_moe_losses = MoeLosses() - moe_before;
    return sum / (B * T) + last_moe_losses;
  }
  double last_moe_losses = 0;  // of the last Loss()
  double MoeLosses() const {
    double sum = 0;
    for (const MoeLayerStats& s : model->moe_stats()) sum += s.aux_loss + s.z_loss;
    return sum;
  }
};

// The step's loss sum stays with the model across micro-batches: the first starts it, the next
// ones add to it.
TEST(GptModel, LossSumAddsUpMicroBatches) {
  Fixture f;
  const double one = f.Loss() * (f.B * f.T);
  ASSERT_TRUE(f.model->Forward(0, f.tokens.data(), f.targets.data(), true, 0.f).ok());
  ASSERT_TRUE(f.model->AccumulateLoss(false).ok());
  double two = 0.0;
  ASSERT_TRUE(f.model->LossSum(&two).ok());
  EXPECT_NEAR(two, 2 * one, 1e-9 * one);
}

// With every target masked out the gradient is the MoE losses' alone: set_moe_loss_scale weighs
// it whatever dloss_scale (1 / the trained targets, clamped to 1 when there are none) is.
TEST(GptModel, MoeLossScaleDoesNotFollowTheMaskedLossScale) {
  Fixture f(TinyMoe(true));
  std::fill(f.targets.begin(), f.targets.end(), -1);
  const auto router_gradients = [&](float dloss_scale) {
    EXPECT_TRUE(f.model->ZeroGradients().ok());
    EXPECT_TRUE(f.model->Forward(0, f.tokens.data(), f.targets.data(), true, dloss_scale).ok());
    EXPECT_TRUE(f.model->Backward(0).ok());
    Tensor g = f.model->gradient_buffer();
    std::vector<float> all(static_cast<size_t>(g.numel()));
    EXPECT_TRUE(f.backend->CopyToHost(all.data(), g.data, g.bytes()).ok());
    std::vector<float> router;
    for (const ParameterInfo& p : f.model->parameters())
      if (p.role == ParamRole::kRouterWeight)
        router.insert(router.end(), all.begin() + p.offset, all.begin() + p.offset + p.local_numel());
    return router;
  };
  f.model->set_moe_loss_scale(0.25f);
  const std::vector<float> a = router_gradients(1.f), b = router_gradients(1.f / 64);
  f.model->set_moe_loss_scale(0.5f);
  const std::vector<float> twice = router_gradients(1.f);
  ASSERT_FALSE(a.empty());
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(a[i])));
    EXPECT_NEAR(b[i], a[i], 1e-6 * std::fabs(a[i]) + 1e-12) << "router gradient " << i;
    EXPECT_NEAR(twice[i], 2 * a[i], 1e-6 * std::fabs(a[i]) + 1e-12) << "router gradient " << i;
  }
  EXPECT_GT(largest, 1e-6);  // the MoE losses do reach the router
}

class ModelGradients : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelGradients, InitialLossIsCloseToLogVocab) {
  Fixture f(GetParam().config);
  const double loss = f.Loss();
  EXPECT_NEAR(loss - f.last_moe_losses, std::log(61.0), 0.05);
  // Near-uniform routing: the load-balancing loss near its coefficient in each MoE layer.
  if (f.config.moe()) {
    EXPECT_NEAR(f.last_moe_losses, 2 * f.config.moe_aux_loss_coeff, 0.01);
  }
}

TEST_P(ModelGradients, EveryGradientMatchesFiniteDifferences) {
  Fixture f(GetParam().config);
  // Larger weights than the 0.02 init so that every path carries a visible gradient.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 0.3f);
  for (float& p : f.params) p += normal(rng);
  ASSERT_TRUE(f.model->SetParameters(f.params).ok());
  // Leftovers of an earlier step in the gradient buffer: ZeroGradients zeroes some of it and the
  // first Backward writes over the rest, so none of them may survive.
  Tensor g = f.model->gradient_buffer();
  const std::vector<float> leftovers(static_cast<size_t>(g.numel()), 1e3f);
  ASSERT_TRUE(f.backend->CopyToDevice(g.data, leftovers.data(), g.bytes()).ok());
  ASSERT_TRUE(f.model->ZeroGradients().ok());
  f.Loss(1.f / (f.B * f.T));
  ASSERT_TRUE(f.model->Backward(0).ok());
  std::vector<float> grads(static_cast<size_t>(g.numel()));
  ASSERT_TRUE(f.backend->CopyToHost(grads.data(), g.data, g.bytes()).ok());
  // Padding between tensors must read zero too (the gradient norm sums over it).
  for (size_t i = 0; i < grads.size(); ++i) {
    bool inside = false;
    for (const ParameterInfo& p : f.model->parameters())
      inside = inside || (i >= p.offset && i < p.offset + static_cast<size_t>(p.local_numel()));
    if (!inside) {
      ASSERT_EQ(grads[i], 0.f) << "padding element " << i;
    }
  }
  // A second micro-batch (the same one again) adds to the first: twice the gradients (up to the
  // order of the additions: wte takes the LM head's and the embedding's parts).
  f.Loss(1.f / (f.B * f.T));
  ASSERT_TRUE(f.model->Backward(0).ok());
  std::vector<float> twice(grads.size());
  ASSERT_TRUE(f.backend->CopyToHost(twice.data(), g.data, g.bytes()).ok());
  for (size_t i = 0; i < grads.size(); ++i)
    ASSERT_NEAR(twice[i], 2 * grads[i], 4e-6 * std::fabs(grads[i]) + 1e-8) << "element " << i;
  const int64_t C = f.config.hidden_size;
  for (const ParameterInfo& p : f.model->parameters()) {
    // A few elements of every tensor, and every element of the qkv biases, whose k and v thirds
    // GPT-2 derives without summing dqkv (zero, and the projection's bias gradient times its
    // weight). The LM head's rows are the real vocabulary's (pad rows get no gradient); an
    // untied embedding's the batch's tokens' (no other row has a gradient, and a random one
    // would compare zero with zero). Then the element of largest gradient among 64 more of the
    // same rows, so that every tensor is also checked where its gradient is large.
    const bool qkv_bias = p.role == ParamRole::kQkvBias || p.role == ParamRole::kQBias ||
                          p.role == ParamRole::kKBias || p.role == ParamRole::kVBias;
    const bool embedding_rows = p.role == ParamRole::kTokenEmbedding && !f.config.tie_embeddings;
    const bool vocab_rows = p.role == ParamRole::kTokenEmbedding || p.role == ParamRole::kLmHead;
    const int64_t n = vocab_rows ? f.config.vocab_size * C : p.local_numel();
    const auto draw = [&]() -> int64_t {
      if (!embedding_rows) return static_cast<int64_t>(rng() % n);
      return f.tokens[rng() % f.tokens.size()] * C + static_cast<int64_t>(rng() % C);
    };
    const auto set = [&](const std::vector<float>& v) { return f.model->SetParameters(v); };
    const auto loss = [&] { return f.Loss(); };
    std::vector<int64_t> picks;
    for (int64_t k = 0; k < (qkv_bias ? n : 4); ++k) picks.push_back(qkv_bias ? k : draw());
    int64_t largest = -1;
    for (int k = 0; k < 64 && !qkv_bias; ++k) {
      const int64_t e = draw();
      if (largest < 0 || std::fabs(grads[p.offset + e]) > std::fabs(grads[p.offset + largest]))
        largest = e;
    }
    if (largest >= 0) picks.push_back(largest);
    for (int64_t e : picks) {
      const size_t i = p.offset + static_cast<size_t>(e);
      ExpectCentralDifference(&f.params, i, grads[i], set, loss,
                              p.name + " element " + std::to_string(e));
    }
  }
}

// Recomputing activations (the GELU output, or whole blocks) must not change a single bit of the
// loss or of any gradient on the deterministic CPU path.
TEST_P(ModelGradients, RecomputationGivesBitIdenticalLossAndGradients) {
  std::vector<float> reference;
  double reference_loss = 0;
  for (const char* mode : {"none", "gelu", "selective", "block"}) {
    Fixture f(GetParam().config);
    f.config.recompute = mode;
    ModelPartition part;
    part.num_layers = f.config.num_layers;
    ASSERT_TRUE(
        GptModel::Create(f.config, part, f.backend.get(), nullptr, f.B, f.T, 1, &f.model).ok());
    ASSERT_TRUE(f.model->SetParameters(f.params).ok());
    f.model->SetDropoutDraw(0, TrainingDraw());
    ASSERT_TRUE(f.model->ZeroGradients().ok());
    const double loss = f.Loss(1.f / (f.B * f.T));
    ASSERT_TRUE(f.model->Backward(0).ok());
    Tensor g = f.model->gradient_buffer();
    std::vector<float> grads(static_cast<size_t>(g.numel()));
    ASSERT_TRUE(f.backend->CopyToHost(grads.data(), g.data, g.bytes()).ok());
    if (reference.empty()) {
      reference = grads;
      reference_loss = loss;
      continue;
    }
    EXPECT_EQ(loss, reference_loss) << mode;
    EXPECT_EQ(grads, reference) << mode;
  }
}

// The head in chunks of 1, 3, 5 and 13 rows (the last chunk shorter) against one pass: the same
// per-token losses bit for bit, the same input gradients of every block (each row's own), and the
// LM head's gradient up to the order of its sums over the chunks.
TEST_P(ModelGradients, LossChunksGiveTheLossAndGradientsOfOnePass) {
  std::vector<float> reference;
  double reference_loss = 0;
  for (int chunk : {0, 1, 3, 5, 13}) {
    Fixture f(WithLossChunks(GetParam().config, chunk));
    ASSERT_TRUE(f.model->ZeroGradients().ok());
    const double loss = f.Loss(1.f / (f.B * f.T));
    ASSERT_TRUE(f.model->Backward(0).ok());
    // A second micro-batch accumulates (the chunks after the first add to the head's gradient).
    f.Loss(1.f / (f.B * f.T));
    ASSERT_TRUE(f.model->Backward(0).ok());
    Tensor g = f.model->gradient_buffer();
    std::vector<float> grads(static_cast<size_t>(g.numel()));
    ASSERT_TRUE(f.backend->CopyToHost(grads.data(), g.data, g.bytes()).ok());
    if (chunk == 0) {  // auto: one chunk at this size
      reference = grads;
      reference_loss = loss;
      continue;
    }
    EXPECT_EQ(loss, reference_loss) << "chunk " << chunk;
    double head_norm = 0, worst = 0;
    for (const ParameterInfo& p : f.model->parameters()) {
      const bool head = p.role == ParamRole::kLmHead || p.role == ParamRole::kTokenEmbedding;
      for (size_t i = p.offset; i < p.offset + static_cast<size_t>(p.local_numel()); ++i) {
        if (!head) {
          ASSERT_EQ(grads[i], reference[i]) << p.name << " chunk " << chunk;
          continue;
        }
        head_norm = std::max(head_norm, std::fabs(static_cast<double>(reference[i])));
        worst = std::max(worst, std::fabs(static_cast<double>(grads[i]) - reference[i]));
      }
    }
    ASSERT_GT(head_norm, 0.0);
    EXPECT_LE(worst, 1e-6 * head_norm) << "LM head gradient, chunk " << chunk;
  }
}

// Without a draw (evaluation, sampling) the model with dropout configured computes exactly what
// the model without dropout does; with one, dropout changes the loss.
TEST_P(ModelGradients, NoDrawMeansNoDropout) {
  const ModelConfig& c = GetParam().config;
  if (c.hidden_dropout == 0 && c.attention_dropout == 0) GTEST_SKIP() << "no dropout configured";
  Fixture dropped(c);
  ModelConfig plain_config = c;
  plain_config.hidden_dropout = plain_config.attention_dropout = 0;
  Fixture plain(plain_config);
  ASSERT_EQ(dropped.params, plain.params);
  const double training = dropped.Loss();
  dropped.model->SetDropoutDraw(0, DropoutDraw());
  EXPECT_EQ(dropped.Loss(), plain.Loss());
  EXPECT_GT(std::fabs(training - plain.Loss()), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Architectures, ModelGradients, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ParameterRegistry, ShardsOfEveryTpRankReassembleTheFullTensor) {
  for (const ModelCase& c : kCases)
    for (int tp : {2, 4}) {
      const ModelConfig m = c.config;
      if (m.kv_heads() % tp != 0) continue;  // whole kv heads per rank (validation refuses it)
      for (const ParameterInfo& full : BuildParameterList(m, ModelPartition{0, 1, 0, 1, 0, 2})) {
        std::vector<float> original(static_cast<size_t>(full.full_numel()));
        for (size_t i = 0; i < original.size(); ++i) original[i] = static_cast<float>(i);
        std::vector<float> rebuilt(original.size(), -1.f);
        for (int r = 0; r < tp; ++r) {
          ParameterInfo p = full;
          std::vector<ParameterInfo> local =
              BuildParameterList(m, ModelPartition{r, tp, 0, 1, 0, 2});
          for (const ParameterInfo& q : local)
            if (q.name == full.name) p = q;
          std::vector<float> shard(static_cast<size_t>(p.local_numel()));
          ExtractShard(p, r, tp, original.data(), shard.data());
          InsertShard(p, r, tp, shard.data(), rebuilt.data());
        }
        EXPECT_EQ(rebuilt, original) << full.name << " tp " << tp;
      }
    }
}

TEST(ParameterRegistry, StagesPartitionTheLayersAndHoldTheTiedEmbeddingAtBothEnds) {
  ModelConfig m = TinyModel();
  m.num_layers = 5;
  DistributedConfig d;
  d.pp_degree = 2;
  ModelPartition first = MakePartition(m, d, 0, 0), last = MakePartition(m, d, 0, 1);
  EXPECT_EQ(first.num_layers + last.num_layers, 5);
  EXPECT_EQ(last.first_layer, first.num_layers);
  int wte = 0, canonical_wte = 0;
  for (const ModelPartition& part : {first, last})
    for (const ParameterInfo& p : BuildParameterList(m, part))
      if (p.name == "transformer.wte.weight") {
        ++wte;
        canonical_wte += p.canonical;
      }
  EXPECT_EQ(wte, 2);
  EXPECT_EQ(canonical_wte, 1);
}

// Sharding's units and pieces: from stage 2 each block's tensors form one unit; over every rank
// of the sharding group, the owned runs cover each element of the flat buffer exactly once, each
// rank's shard is filled exactly once, and every tensor keeps its shape and its place in its unit.
TEST(ShardLayout, PiecesOfEveryRankCoverTheBufferOnce) {
  ModelConfig m = TinyModel();
  m.num_layers = 3;
  for (int stage : {1, 2, 3}) {
    for (int shards : {1, 2, 3, 4}) {
      DistributedConfig d;
      d.sharding.sharding_degree = shards;
      d.sharding.sharding_stage = stage;
      const ModelPartition part = MakePartition(m, d, 0, 0);
      const std::vector<ParameterInfo> params = BuildParameterList(m, part);
      const ShardLayout whole(params, part);
      ASSERT_EQ(whole.units().size(), stage >= 2 && shards > 1 ? 4u : 1u);
      for (const ParameterInfo& p : params) {  // a block's tensors lie inside its unit
        const ShardUnit& u = whole.units()[whole.UnitOf(p.offset)];
        EXPECT_EQ(u.layer, whole.units().size() == 1 ? -1 : p.layer) << p.name;
        EXPECT_LE(p.offset + static_cast<size_t>(p.local_numel()), u.begin + u.size) << p.name;
      }
      std::vector<int> covered(whole.flat_elements(), 0);
      for (int r = 0; r < shards; ++r) {
        ModelPartition mine = part;
        mine.shard_rank = r;
        const ShardLayout layout(params, mine);
        std::vector<int> filled(layout.shard_elements(), 0);
        layout.ForEachOwned(0, layout.flat_elements(), [&](int u, size_t at, size_t to, size_t n) {
          EXPECT_EQ(at, layout.piece_begin(u) + (to - layout.units()[u].shard_offset));
          for (size_t i = 0; i < n; ++i) {
            ++covered[at + i];
            ++filled[to + i];
          }
        });
        for (size_t i = 0; i < filled.size(); ++i) ASSERT_EQ(filled[i], 1) << "shard " << i;
      }
      for (size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace trainer
