// LoRA (model/lora.h) on the CPU backend: the adapter's forward and backward against naive loops
// of the closed form; the whole model's adapter gradients against central finite differences;
// the model with adapters against the same model with the adapters merged into its weights
// (W + scale B A); recomputation bit for bit; and frozen base weights that no optimizer step
// touches.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/gpt.h"
#include "model_test_util.h"
#include "optimizer/adamw.h"

namespace trainer {
namespace {

std::vector<float> Random(size_t n, std::mt19937* rng, float sd = 1.f) {
  std::normal_distribution<float> normal(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(*rng);
  return v;
}

// A CPU f32 tensor holding `values`.
Tensor Upload(Backend* be, std::vector<float>* keep, std::initializer_list<int64_t> shape) {
  Tensor t(nullptr, DType::kF32, shape);
  void* p = nullptr;
  EXPECT_TRUE(be->Allocate(t.bytes(), &p).ok());
  t.data = p;
  EXPECT_TRUE(be->CopyToDevice(p, keep->data(), t.bytes()).ok());
  return t;
}

std::vector<float> Download(Backend* be, Tensor t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(be->CopyToHost(v.data(), t.data, t.bytes()).ok());
  return v;
}

// A group of adapters on one input (lora.h: q, k and v of a fused qkv; gate and up; or one
// alone), their A's stacked in one buffer: y (+)= s x A_i^T B_i^T in each member's column block
// and the gradients, against the closed form written out as loops, with y and dx written over
// or added to.
struct GroupCase {
  const char* name;
  int64_t W;                     // the base output's width
  std::vector<int64_t> first;    // each member's first column
  std::vector<int64_t> width;    // and its width
};

class LoraGroupTest : public ::testing::TestWithParam<std::tuple<GroupCase, bool>> {};

TEST_P(LoraGroupTest, MatchesTheClosedForm) {
  const GroupCase& gc = std::get<0>(GetParam());
  const bool overwrite = std::get<1>(GetParam());
  const GradientWrite write = overwrite ? GradientWrite::kOverwrite : GradientWrite::kAccumulate;
  const int64_t N = 5, in = 7, r = 3, W = gc.W, G = static_cast<int64_t>(gc.first.size());
  const float s = 0.75f;
  std::unique_ptr<Backend> be = MakeCpuBackend();
  std::mt19937 rng(5);
  std::vector<float> x = Random(N * in, &rng), a = Random(G * r * in, &rng);
  std::vector<float> y = Random(N * W, &rng), dy = Random(N * W, &rng), dx = Random(N * in, &rng);
  std::vector<float> ga(G * r * in, 0.5f), u(N * G * r, 0.f), du(N * G * r);
  std::vector<std::vector<float>> b(G), gb(G);
  LoraContext ctx;
  ctx.backend = be.get();
  ctx.scale = s;
  ctx.scratch.du = Upload(be.get(), &du, {N, G * r});
  LoraAdapter wt[kLoraSlots], gt[kLoraSlots];
  const Tensor stacked_a = Upload(be.get(), &a, {G * r, in});
  const Tensor stacked_ga = Upload(be.get(), &ga, {G * r, in});
  for (int64_t i = 0; i < G; ++i) {
    b[i] = Random(gc.width[i] * r, &rng);
    gb[i].assign(gc.width[i] * r, -0.25f);
    for (LoraAdapter* t : {&wt[i], &gt[i]}) {
      t->slot = static_cast<LoraSlot>(kLoraQ + i);
      t->first_column = gc.first[i];
      t->base_width = W;
    }
    wt[i].a = stacked_a.rows(i * r, r);
    gt[i].a = stacked_ga.rows(i * r, r);
    wt[i].b = Upload(be.get(), &b[i], {gc.width[i], r});
    gt[i].b = Upload(be.get(), &gb[i], {gc.width[i], r});
  }
  const LoraAdapters wg = GroupLoraAdapters(wt, kLoraQkv), gg = GroupLoraAdapters(gt, kLoraQkv);
  ASSERT_EQ(wg.size, G);
  ASSERT_EQ(wg.a.data, stacked_a.data);
  ASSERT_EQ(Rows(wg.a), G * r);
  const Tensor tx = Upload(be.get(), &x, {N, in}), ty = Upload(be.get(), &y, {N, W});
  const Tensor tu = Upload(be.get(), &u, {N, G * r}), tdy = Upload(be.get(), &dy, {N, W});
  const Tensor tdx = Upload(be.get(), &dx, {N, in});
  ASSERT_TRUE(LoraForward(ctx, wg, tx, tu, ty, write).ok());
  ASSERT_TRUE(LoraBackward(ctx, wg, gg, tx, tu, tdy, tdx, write).ok());
  const std::vector<float> y2 = Download(be.get(), ty), dx2 = Download(be.get(), tdx);
  const std::vector<float> ga2 = Download(be.get(), stacked_ga);
  // h_i = x A_i^T (N, r); y[:, first_i + j] (+)= s sum_k h_i[n,k] B_i[j,k].
  std::vector<double> h(G * N * r, 0.0), dh(G * N * r, 0.0);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < in; ++i)
          h[(g * N + n) * r + k] += double(x[n * in + i]) * a[(g * r + k) * in + i];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < W; ++c) {
      double want = y[n * W + c];
      for (int64_t g = 0; g < G; ++g) {
        const int64_t j = c - gc.first[g];
        if (j < 0 || j >= gc.width[g]) continue;
        if (overwrite) want = 0.0;
        for (int64_t k = 0; k < r; ++k) want += s * h[(g * N + n) * r + k] * b[g][j * r + k];
      }
      EXPECT_NEAR(y2[n * W + c], want, 1e-4) << "y " << n << "," << c;
    }
  // dB_i[j,k] = s sum_n dy[n, first_i+j] h_i[n,k]; dh_i[n,k] = s sum_j dy[n, first_i+j] B_i[j,k].
  for (int64_t g = 0; g < G; ++g) {
    const std::vector<float> gb2 = Download(be.get(), gt[g].b);
    for (int64_t j = 0; j < gc.width[g]; ++j)
      for (int64_t k = 0; k < r; ++k) {
        double want = -0.25;
        for (int64_t n = 0; n < N; ++n)
          want += s * double(dy[n * W + gc.first[g] + j]) * h[(g * N + n) * r + k];
        EXPECT_NEAR(gb2[j * r + k], want, 1e-4) << "dB " << g << ": " << j << "," << k;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < r; ++k)
        for (int64_t j = 0; j < gc.width[g]; ++j)
          dh[(g * N + n) * r + k] += s * double(dy[n * W + gc.first[g] + j]) * b[g][j * r + k];
  }
  // dA_i[k,i] = sum_n dh_i[n,k] x[n,i]; dx[n,i] (+)= sum_i,k dh_i[n,k] A_i[k,i].
  for (int64_t g = 0; g < G; ++g)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t i = 0; i < in; ++i) {
        double want = 0.5;
        for (int64_t n = 0; n < N; ++n) want += dh[(g * N + n) * r + k] * x[n * in + i];
        EXPECT_NEAR(ga2[(g * r + k) * in + i], want, 1e-4) << "dA " << g << ": " << k << "," << i;
      }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < in; ++i) {
      double want = overwrite ? 0.0 : dx[n * in + i];
      for (int64_t g = 0; g < G; ++g)
        for (int64_t k = 0; k < r; ++k) want += dh[(g * N + n) * r + k] * a[(g * r + k) * in + i];
      EXPECT_NEAR(dx2[n * in + i], want, 1e-4) << "dx " << n << "," << i;
    }
}

const GroupCase kGroupCases[] = {
    {"whole", 4, {0}, {4}},                // a full-width linear (o, down, c_fc)
    {"block", 11, {3}, {4}},               // k alone in a fused qkv
    {"qkv", 8, {0, 4, 6}, {4, 2, 2}},      // q, k and v tiling their output
    {"q_and_v", 8, {0, 6}, {4, 2}},        // two of three: k's columns left alone
};

INSTANTIATE_TEST_SUITE_P(Groups, LoraGroupTest,
                         ::testing::Combine(::testing::ValuesIn(kGroupCases), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) ? "_written" : "_added");
                         });

// A's that do not lie back to back are refused with a line naming the bug, not read past.
TEST(LoraGroup, RefusesAsThatAreNotStacked) {
  std::unique_ptr<Backend> be = MakeCpuBackend();
  std::vector<float> a1(6, 0.f), a2(6, 0.f), b(4, 0.f), v(20, 0.f);
  LoraAdapter wt[kLoraSlots];
  for (int i = 0; i < 2; ++i) {
    wt[i].slot = static_cast<LoraSlot>(kLoraQ + i);
    wt[i].a = Tensor((i ? a2 : a1).data(), DType::kF32, {2, 3});
    wt[i].b = Tensor(b.data(), DType::kF32, {2, 2});
    wt[i].first_column = 2 * i;
    wt[i].base_width = 4;
  }
  const LoraAdapters w = GroupLoraAdapters(wt, kLoraQkv);
  EXPECT_TRUE(w.a.empty());
  LoraContext ctx;
  ctx.backend = be.get();
  ctx.scale = 1.f;
  const Status st = LoraForward(ctx, w, Tensor(v.data(), DType::kF32, {2, 3}),
                                Tensor(v.data(), DType::kF32, {2, 4}),
                                Tensor(v.data(), DType::kF32, {2, 4}), GradientWrite::kAccumulate);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("back to back"), std::string::npos) << st.message();
}

ModelConfig TinyGpt2() {
  return WithLora(TinyModel(), 3, 6, "all");
}

// GQA with head_dim != hidden/heads, q/k norm, untied LM head: every adapter's column block.
ModelConfig LoraLlama(const char* targets) {
  return WithLora(TinyLlama(true, false, false), 3, 6, targets);
}

// `m` with Model.lora_dropout: training forwards draw masks (Fixture), evaluation none.
ModelConfig WithLoraDropout(ModelConfig m) {
  m.lora_dropout = 0.3;
  return m;
}

const ModelCase kCases[] = {
    {"gpt2_all", TinyGpt2()},
    {"llama_all", LoraLlama("q,k,v,o,gate,up,down")},
    {"llama_k_up", LoraLlama("k_proj,up_proj")},
    {"gpt2_dropout", WithLoraDropout(TinyGpt2())},
    {"llama_dropout", WithLoraDropout(LoraLlama("q,k,v,o,gate,up,down"))},
};


// A model of `config` with random base weights and random adapters (B too, so that every
// adapter path carries a gradient).
struct Fixture {
  explicit Fixture(ModelConfig c) : config(c) { Build(); }
  ModelConfig config;
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  std::unique_ptr<GptModel> model;
  std::vector<int32_t> tokens, targets;
  int B = 2, T = 7;
  std::vector<float> base, adapters;

  void Build() {
    ModelPartition part;
    part.num_layers = config.num_layers;
    ASSERT_TRUE(GptModel::Create(config, part, backend.get(), nullptr, B, T, 1, &model).ok());
    std::mt19937 rng(3);
    base = InitialParameterValues(config, part, model->frozen_parameters(), 7);
    for (float& v : base) v += Random(1, &rng, 0.3f)[0];
    adapters = Random(TotalLocalElements(model->parameters()), &rng, 0.3f);
    ASSERT_TRUE(model->SetFrozenParameters(base).ok());
    ASSERT_TRUE(model->SetParameters(adapters).ok());
    RandomTokens(B * T, config.vocab_size, &rng, &tokens, &targets);
    if (config.lora_dropout > 0) model->SetDropoutDraw(0, TrainingDraw());
  }
  double Loss(float dloss_scale = 0.f) {
    return MeanLoss(model.get(), tokens, targets, dloss_scale);
  }
  std::vector<float> Gradients() {
    Tensor g = model->gradient_buffer();
    std::vector<float> out(static_cast<size_t>(g.numel()));
    EXPECT_TRUE(backend->CopyToHost(out.data(), g.data, g.bytes()).ok());
    return out;
  }
};

class LoraModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(LoraModel, OnlyAdaptersTrain) {
  Fixture f(GetParam().config);
  for (const ParameterInfo& p : f.model->parameters())
    EXPECT_TRUE(p.role == ParamRole::kLoraA || p.role == ParamRole::kLoraB) << p.name;
  EXPECT_EQ(f.model->frozen_parameters().size(), FullBaseParameterList(f.config).size());
  for (const ParameterInfo& p : f.model->frozen_parameters())
    EXPECT_EQ(f.model->Find(p.name), nullptr) << p.name << " has a gradient";
}

TEST_P(LoraModel, AdapterGradientsMatchFiniteDifferences) {
  Fixture f(GetParam().config);
  ASSERT_TRUE(f.model->ZeroGradients().ok());
  f.Loss(1.f / (f.B * f.T));
  ASSERT_TRUE(f.model->Backward(0).ok());
  const std::vector<float> grads = f.Gradients();
  std::mt19937 rng(11);
  for (const ParameterInfo& p : f.model->parameters()) {
    for (int k = 0; k < 4; ++k) {
      const size_t i = p.offset + rng() % static_cast<size_t>(p.local_numel());
      ExpectCentralDifference(
          &f.adapters, i, grads[i],
          [&](const std::vector<float>& v) { return f.model->SetParameters(v); },
          [&] { return f.Loss(); }, p.name + " element " + std::to_string(i - p.offset),
          f.config.lora_dropout > 0 ? 2e-3 : 1e-2);  // kept inputs scaled by 1/(1-p): more curved
    }
  }
  ASSERT_TRUE(f.model->SetParameters(f.adapters).ok());
  // A second micro-batch adds to the first.
  f.Loss(1.f / (f.B * f.T));
  ASSERT_TRUE(f.model->Backward(0).ok());
  const std::vector<float> twice = f.Gradients();
  for (size_t i = 0; i < grads.size(); ++i)
    ASSERT_NEAR(twice[i], 2 * grads[i], 1e-5 * std::fabs(grads[i]) + 1e-8) << "element " << i;
}

// The adapters merged into the base (W + scale B A, whole tensors, as `trainer export --lora
// merge` writes them) give the same loss without LoRA.
// With Model.lora_dropout, evaluation (no draw) drops nothing: it equals the merged model too,
// and a training forward differs.
TEST_P(LoraModel, EqualsTheMergedModel) {
  Fixture f(GetParam().config);
  const double trained = f.Loss();
  f.model->SetDropoutDraw(0, DropoutDraw());
  const double with_adapters = f.Loss();
  if (f.config.lora_dropout > 0) {
    EXPECT_GT(std::fabs(trained - with_adapters), 1e-4);
  }
  ModelConfig plain = f.config;
  plain.lora_rank = 0;
  const std::vector<ParameterInfo> base = FullBaseParameterList(f.config);
  std::vector<float> merged = f.base;
  const float scale = static_cast<float>(f.config.lora_alpha / f.config.lora_rank);
  const ModelSpec spec = MakeModelSpec(f.config);
  for (const ParameterInfo& p : f.model->parameters()) {
    if (p.role != ParamRole::kLoraA) continue;
    const ParameterInfo* pb = nullptr;  // the B of the same adapter
    for (const ParameterInfo& q : f.model->parameters())
      if (q.role == ParamRole::kLoraB && q.layer == p.layer && q.lora_base == p.lora_base) pb = &q;
    ASSERT_NE(pb, nullptr) << p.name;
    const std::string name = ParameterName(spec, p.lora_base, p.layer);
    const ParameterInfo* w = nullptr;
    for (const ParameterInfo& q : base)
      if (q.name == name) w = &q;
    ASSERT_NE(w, nullptr) << name;
    const int64_t out = w->full_shape[0], in = w->full_shape[1], r = f.config.lora_rank;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double d = 0;
        for (int64_t k = 0; k < r; ++k)
          d += double(f.adapters[pb->offset + o * r + k]) * f.adapters[p.offset + k * in + i];
        merged[w->offset + o * in + i] += static_cast<float>(scale * d);
      }
  }
  ModelPartition part;
  part.num_layers = plain.num_layers;
  std::unique_ptr<GptModel> m;
  ASSERT_TRUE(GptModel::Create(plain, part, f.backend.get(), nullptr, f.B, f.T, 1, &m).ok());
  ASSERT_TRUE(m->SetParameters(merged).ok());
  f.model = std::move(m);
  EXPECT_NEAR(f.Loss(), with_adapters, 1e-5);
}

TEST_P(LoraModel, RecomputationGivesBitIdenticalLossAndGradients) {
  const char* modes[] = {"none", "gelu", "selective", "block"};
  std::vector<std::pair<double, std::vector<float>>> runs;  // loss and gradients of each mode
  for (const char* mode : modes) {
    ModelConfig c = GetParam().config;
    c.recompute = mode;
    Fixture f(c);
    ASSERT_TRUE(f.model->ZeroGradients().ok());
    const double loss = f.Loss(1.f / (f.B * f.T));
    ASSERT_TRUE(f.model->Backward(0).ok());
    runs.emplace_back(loss, f.Gradients());
  }
  for (size_t m = 1; m < runs.size(); ++m) {
    EXPECT_EQ(runs[m].first, runs[0].first) << modes[m];
    EXPECT_EQ(runs[m].second, runs[0].second) << modes[m];
  }
}

// AdamW steps move the adapters and leave every frozen weight as it was, bit for bit; the
// optimizer holds state for the adapters only.
TEST_P(LoraModel, OptimizerStepsLeaveTheBaseBitIdentical) {
  Fixture f(GetParam().config);
  std::vector<float> before;
  ASSERT_TRUE(f.model->FrozenParameterValues(&before).ok());
  ASSERT_EQ(before, f.base);
  OptimizerConfig oc;
  std::unique_ptr<AdamW> opt;
  ASSERT_TRUE(AdamW::Create(f.model.get(), oc, nullptr, &opt).ok());
  ASSERT_TRUE(opt->SetMaster(f.adapters).ok());
  EXPECT_EQ(AdamW::BufferBytes(f.model->parameters(), 1),
            3 * Backend::AllocationSize(TotalLocalElements(f.model->parameters()) * 4) +
                Backend::AllocationSize(8));
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(f.model->ZeroGradients().ok());
    f.Loss(1.f / (f.B * f.T));
    ASSERT_TRUE(f.model->Backward(0).ok());
    ASSERT_TRUE(opt->Step(step, 1e-2, 1.f).ok());
  }
  std::vector<float> after, master;
  ASSERT_TRUE(f.model->FrozenParameterValues(&after).ok());
  EXPECT_EQ(after, before);
  ASSERT_TRUE(opt->Download(0, &master).ok());
  EXPECT_NE(master, f.adapters);
}

INSTANTIATE_TEST_SUITE_P(Architectures, LoraModel, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// PEFT's init: A within +-1/sqrt(in), not all equal, the same whatever the layout; B zero.
TEST(LoraInit, AsPeft) {
  const ModelConfig c = LoraLlama("q,o");
  for (const ParameterInfo& p : FullParameterList(c)) {
    std::vector<float> v(static_cast<size_t>(p.full_numel()));
    InitFullTensor(c, 9, p, v.data());
    float lo = 0, hi = 0;
    for (float x : v) lo = std::min(lo, x), hi = std::max(hi, x);
    if (p.role == ParamRole::kLoraB) {
      EXPECT_EQ(lo, 0.f);
      EXPECT_EQ(hi, 0.f);
      continue;
    }
    const float bound = 1.f / std::sqrt(static_cast<float>(p.full_shape[1]));
    EXPECT_GE(lo, -bound) << p.name;
    EXPECT_LE(hi, bound) << p.name;
    EXPECT_GT(hi - lo, bound) << p.name;
  }
}

// MFU's FLOPs: the frozen weights cost 4 per parameter (forward, input gradient), the adapters 6.
TEST(LoraFlops, FrozenWeightsCountFourAdaptersSix) {
  const ModelConfig lora = LoraLlama("q,v,down");
  ModelConfig full = lora;
  full.lora_rank = 0;
  const int64_t T = 8;
  const ModelSpec spec = MakeModelSpec(full);
  const double attention = 12.0 * spec.layers * spec.q_width() * T;
  double adapters = 0;
  for (const ParameterInfo& p : FullParameterList(lora)) adapters += p.full_numel();
  const double weights = (TrainingFlopsPerToken(spec, T) - attention) / 6;
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(MakeModelSpec(lora), T),
                   4 * weights + 6 * adapters + attention);
}

}  // namespace
}  // namespace trainer
