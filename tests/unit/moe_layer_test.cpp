// The mixture-of-experts layer on the CPU backend against a naive per-token loop written here
// independently, in double precision: for each token its router scores, its top-k (the lower
// expert index wins ties), each chosen expert's SwiGLU MLP, the weighted sum and the shared
// expert; the load-balancing and z losses from their definitions. The layer's forward is checked
// against the loop's value, every gradient (router, experts, shared expert, input) against
// central differences of the loop's objective; capacity dropping against the loop with the
// documented rule (the first tokens in token order); and dropless routing against a permutation
// of the tokens (the outputs permute the same way).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu_test_util.h"
#include "model/moe_layer.h"

namespace trainer {
namespace {

using DoubleVec = testing::DoubleVec;

struct Case {
  const char* name;
  MoeSpec spec;
};
std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

MoeSpec Spec(MoeScore score, bool pre_softmax, bool norm, int64_t shared, MoeAuxLoss aux,
             double capacity) {
  MoeSpec s;
  s.num_experts = 5;
  s.top_k = 2;
  s.ffn = 6;
  s.shared_ffn = shared;
  s.score = score;
  s.pre_softmax = pre_softmax;
  s.norm_topk_prob = norm;
  s.aux_loss_coeff = 0.3;
  s.aux_loss = aux;
  s.z_loss_coeff = 0.05;
  s.capacity_factor = capacity;
  return s;
}

const Case kCases[] = {
    {"qwen2_softmax_then_topk_shared",
     Spec(MoeScore::kSoftmax, true, false, 7, MoeAuxLoss::kMicroBatch, 0)},
    {"mixtral_topk_then_softmax_seq_aux",
     Spec(MoeScore::kSoftmax, false, false, 0, MoeAuxLoss::kSequence, 0)},
    {"olmoe_normalised_topk", Spec(MoeScore::kSoftmax, true, true, 0, MoeAuxLoss::kMicroBatch, 0)},
    {"sigmoid_normalised_shared",
     Spec(MoeScore::kSigmoid, true, true, 4, MoeAuxLoss::kMicroBatch, 0)},
    {"capacity_drops", Spec(MoeScore::kSoftmax, true, false, 3, MoeAuxLoss::kSequence, 0.6)},
    {"sigmoid_expert_bias", [] {
       MoeSpec s = Spec(MoeScore::kSigmoid, true, true, 0, MoeAuxLoss::kMicroBatch, 0);
       s.bias_update_rate = 1e-3;  // the layer then reads kBias
       return s;
     }()},
};

// The expert bias of the cases with bias_update_rate > 0: large enough to move choices.
const float kBias[5] = {0.3f, -0.2f, 0.1f, 0.f, -0.4f};

constexpr int64_t kB = 3, kT = 4, kN = kB * kT, kC = 8;

// Parameters and input of the layer, all in one vector (so one finite-difference loop covers
// all): x (N,C), router (E',C), experts' gate_up (E,2F,C) and down (E,C,F), shared gate_up
// (2Fs,C) and down (C,Fs).
struct Layout {
  explicit Layout(const MoeSpec& s) {
    const int64_t E = s.num_experts, F = s.ffn, Fs = s.shared_ffn;
    int64_t at = 0;
    for (int64_t n : {kN * kC, s.router_rows() * kC, E * 2 * F * kC, E * kC * F, 2 * Fs * kC,
                      kC * Fs}) {
      offset.push_back(at);
      at += n;
    }
    total = at;
  }
  std::vector<int64_t> offset;  // x, router, gu, down, shared gu, shared down
  int64_t total;
};

double Silu(double v) {
  return v / (1 + std::exp(-v));
}

// The SwiGLU expert y (C) = down (C,F) (silu(gate x) * up x), gate_up (2F,C) = [gate; up].
std::vector<double> Expert(const double* gu, const double* down, const double* x, int64_t F) {
  std::vector<double> act(F), y(kC, 0.0);
  for (int64_t f = 0; f < F; ++f) {
    double g = 0, u = 0;
    for (int64_t c = 0; c < kC; ++c) {
      g += gu[f * kC + c] * x[c];
      u += gu[(F + f) * kC + c] * x[c];
    }
    act[f] = Silu(g) * u;
  }
  for (int64_t c = 0; c < kC; ++c)
    for (int64_t f = 0; f < F; ++f) y[c] += down[c * F + f] * act[f];
  return y;
}

// The naive layer: out (N*C), then the aux and z losses appended (N*C + 2 values).
DoubleVec Naive(const MoeSpec& s, const DoubleVec& p) {
  const Layout L(s);
  const int E = s.num_experts, K = s.top_k;
  const int64_t F = s.ffn, Fs = s.shared_ffn;
  const double* x = p.data();
  const double* router = p.data() + L.offset[1];
  DoubleVec out(kN * kC + 2, 0.0);
  const int64_t capacity =
      s.capacity_factor > 0 ? static_cast<int64_t>(std::ceil(s.capacity_factor * kN * K / E)) : 0;
  std::vector<int64_t> taken(E, 0);
  std::vector<std::vector<double>> scores(kN, std::vector<double>(E));
  std::vector<std::vector<int>> chosen(kN);
  double z = 0;
  for (int64_t t = 0; t < kN; ++t) {
    std::vector<double> logit(s.router_rows(), 0.0);
    for (int e = 0; e < s.router_rows(); ++e)
      for (int64_t c = 0; c < kC; ++c) logit[e] += router[e * kC + c] * x[t * kC + c];
    double max = *std::max_element(logit.begin(), logit.begin() + E), sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(logit[e] - max);
    const double lse = max + std::log(sum);
    z += lse * lse / kN;
    std::vector<double>& score = scores[t];
    for (int e = 0; e < E; ++e)
      score[e] = s.score == MoeScore::kSigmoid ? 1 / (1 + std::exp(-logit[e]))
                                               : std::exp(logit[e] - lse);
    // Top-k: by score (Mixtral: by logit, the same order), plus the expert bias if any, larger
    // first, lower index on ties.
    std::vector<double> key = score;
    if (s.bias_update_rate > 0)
      for (int e = 0; e < E; ++e) key[e] += kBias[e];
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return key[a] > key[b]; });
    std::vector<int> top(order.begin(), order.begin() + K);
    std::sort(top.begin(), top.end());
    chosen[t] = top;
    std::vector<double> w(K);
    double wsum = 0;
    for (int k = 0; k < K; ++k) wsum += (w[k] = score[top[k]]);
    const bool renormalise = s.norm_topk_prob || (s.score == MoeScore::kSoftmax && !s.pre_softmax);
    for (int k = 0; k < K; ++k)
      if (renormalise) w[k] /= wsum;
    for (int k = 0; k < K; ++k) {
      const int e = top[k];
      if (capacity > 0 && taken[e]++ >= capacity) continue;  // dropped: past the capacity
      const std::vector<double> y = Expert(p.data() + L.offset[2] + e * 2 * F * kC,
                                           p.data() + L.offset[3] + e * kC * F, x + t * kC, F);
      for (int64_t c = 0; c < kC; ++c) out[t * kC + c] += w[k] * y[c];
    }
    if (Fs > 0) {
      const double gate = 1 / (1 + std::exp(-logit[E]));
      const std::vector<double> y =
          Expert(p.data() + L.offset[4], p.data() + L.offset[5], x + t * kC, Fs);
      for (int64_t c = 0; c < kC; ++c) out[t * kC + c] += gate * y[c];
    }
  }
  // Load balancing over groups (the micro-batch, or each sequence): coeff E/(K n^2)
  // sum_e (sum_t q_te) count_e, averaged over the groups; q the scores (sigmoid: normalised).
  const int64_t G = s.aux_loss == MoeAuxLoss::kSequence ? kB : 1, n = kN / G;
  double aux = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int e = 0; e < E; ++e) {
      double q = 0, count = 0;
      for (int64_t t = g * n; t < (g + 1) * n; ++t) {
        double total = 0;
        for (int j = 0; j < E; ++j) total += scores[t][j];
        q += scores[t][e] / (s.score == MoeScore::kSigmoid ? total : 1.0);
        count += std::count(chosen[t].begin(), chosen[t].end(), e);
      }
      aux += s.aux_loss_coeff * E / (double(K) * n * n) * q * count / G;
    }
  out[kN * kC] = aux;
  out[kN * kC + 1] = s.z_loss_coeff * z;
  return out;
}

// The layer on the CPU backend over host buffers.
struct LayerRun {
  LayerRun(const MoeSpec& spec, const std::vector<float>& p) : s(spec), L(spec), params(p) {
    const int64_t E = s.num_experts, K = s.top_k, K2 = s.router_rows() - E + K, F = s.ffn,
                  Fs = s.shared_ffn;
    auto f32 = [&](std::initializer_list<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      store.emplace_back(static_cast<size_t>(std::max<int64_t>(n, 1)), 0.f);
      return Tensor(n > 0 ? store.back().data() : nullptr, DType::kF32, shape);
    };
    auto i32 = [&](std::initializer_list<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      ints.emplace_back(static_cast<size_t>(n), 0);
      return Tensor(ints.back().data(), DType::kI32, shape);
    };
    auto param = [&](int i, std::initializer_list<int64_t> shape, std::vector<float>* v) {
      return Tensor(v->data() + L.offset[i], DType::kF32, shape);
    };
    grads.assign(params.size(), 0.f);
    x = param(0, {kB, kT, kC}, &params);
    dx = param(0, {kB, kT, kC}, &grads);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<float>* v = pass == 0 ? &params : &grads;
      MoeWeights& w = pass == 0 ? weights : gradients;
      w.router = param(1, {s.router_rows(), kC}, v);
      w.experts_gu = param(2, {E, 2 * F, kC}, v);
      w.experts_down = param(3, {E, kC, F}, v);
      if (Fs > 0) {
        w.shared_gu = param(4, {2 * Fs, kC}, v);
        w.shared_down = param(5, {kC, Fs}, v);
      }
    }
    store.reserve(64);
    ints.reserve(8);
    a.logits = f32({kN, s.router_rows()});
    a.probs = f32({kN, E});
    a.lse = f32({kN});
    a.weights = f32({kN, K2});
    a.experts = i32({kN, K});
    a.slots = i32({kN, K2});
    a.counts = i32({E});
    a.aux_coef = f32({s.aux_loss == MoeAuxLoss::kSequence ? kB : 1, E});
    a.losses = Tensor(losses.data(), DType::kF64, {2});
    a.x_perm = f32({kN * K2, kC});
    a.h = f32({kN * K, 2 * F});
    a.act = f32({kN * K, F});
    a.shared_h = f32({kN, 2 * Fs});
    a.shared_act = f32({kN, Fs});
    a.y = f32({kN * K2, kC});
    a.out = f32({kN, kC});
    if (s.bias_update_rate > 0) weights.bias = Tensor(bias.data(), DType::kF32, {E});
    a.dispatch = &dispatch;
    a.stats = &stats;
    MoeScratch& m = ctx.scratch;
    m.dweights = f32({kN, K2});
    m.dlogits = f32({kN, s.router_rows()});
    m.dy = f32({kN * K2, kC});
    m.dx_perm = f32({kN * K2, kC});
    m.dh = f32({kN * K, 2 * F});
    m.dact = f32({kN * K, F});
    m.shared_dh = f32({kN, 2 * Fs});
    m.shared_dact = f32({kN, Fs});
    host_staging.resize(MoeHostStagingBytes(s.num_experts) / sizeof(double) + 1);
    m.host_staging = host_staging.data();
    ctx.backend = backend.get();
    ctx.spec = &s;
    ctx.loss_scale = 1.f;  // the objective: sum(out * R) + aux + z
    ctx.record = true;
  }
  Status Forward() { return MoeForward(ctx, weights, x, a); }
  Status Backward(std::vector<float>& dout) {
    return MoeBackward(ctx, weights, gradients, x, a, Tensor(dout.data(), DType::kF32, {kN, kC}),
                       dx);
  }
  std::vector<float> Out() const {
    const float* o = a.out.as<float>();
    return std::vector<float>(o, o + kN * kC);
  }

  MoeSpec s;
  Layout L;
  std::vector<float> params, grads;
  std::vector<float> bias{kBias, kBias + 5};
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  std::vector<std::vector<float>> store;
  std::vector<std::vector<int32_t>> ints;
  std::vector<double> losses = std::vector<double>(2);
  std::vector<double> host_staging;  // MoeScratch::host_staging
  Tensor x, dx;
  MoeWeights weights, gradients;
  MoeActivations a;
  MoeDispatch dispatch;
  MoeLayerStats stats;
  MoeContext ctx;
};

class MoeLayer : public ::testing::TestWithParam<Case> {};

std::vector<float> Parameters(const MoeSpec& s, uint32_t seed) {
  // Inputs and weights of order one, so that the router's scores spread and the experts differ.
  std::vector<float> p = testing::RandomFloats(static_cast<size_t>(Layout(s).total), seed, -0.8f, 0.8f);
  return p;
}

TEST_P(MoeLayer, ForwardAndLossesMatchTheNaiveLoop) {
  const MoeSpec& s = GetParam().spec;
  LayerRun run(s, Parameters(s, 5));
  ASSERT_TRUE(run.Forward().ok());
  const DoubleVec want = Naive(s, DoubleVec(run.params.begin(), run.params.end()));
  EXPECT_TRUE(testing::AllClose(run.Out(), DoubleVec(want.begin(), want.begin() + kN * kC), 2e-6));
  EXPECT_NEAR(run.stats.aux_loss, want[kN * kC], 1e-6 * want[kN * kC]);
  EXPECT_NEAR(run.stats.z_loss, want[kN * kC + 1], 1e-6 * want[kN * kC + 1]);
  // The load counts every choice, kept or dropped.
  int64_t load = 0;
  for (int64_t v : run.stats.load) load += v;
  EXPECT_EQ(load, kN * s.top_k);
  if (s.capacity_factor > 0) {
    EXPECT_GT(run.dispatch.dropped, 0) << "the case should drop tokens";
  } else {
    EXPECT_EQ(run.dispatch.dropped, 0);
  }
}

TEST_P(MoeLayer, EveryGradientMatchesFiniteDifferencesOfTheNaiveLoop) {
  const MoeSpec& s = GetParam().spec;
  LayerRun run(s, Parameters(s, 9));
  const std::vector<float> R = testing::RandomFloats(kN * kC, 13);
  ASSERT_TRUE(run.Forward().ok());
  std::vector<float> dout = R;
  ASSERT_TRUE(run.Backward(dout).ok());
  // Objective: sum(out * R) + aux + z.
  DoubleVec weights(R.begin(), R.end());
  weights.push_back(1.0);
  weights.push_back(1.0);
  const DoubleVec want = testing::NumericGradient([&](const DoubleVec& p) { return Naive(s, p); },
                                         DoubleVec(run.params.begin(), run.params.end()), weights);
  const char* names[] = {"x", "router", "experts gate_up", "experts down", "shared gate_up",
                         "shared down"};
  for (size_t i = 0; i < run.L.offset.size(); ++i) {
    const int64_t begin = run.L.offset[i];
    const int64_t end = i + 1 < run.L.offset.size() ? run.L.offset[i + 1] : run.L.total;
    if (begin == end) continue;
    EXPECT_TRUE(testing::AllClose(run.grads.data() + begin,
                         DoubleVec(want.begin() + begin, want.begin() + end), 2e-4))
        << names[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Routers, MoeLayer, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Dropless routing treats each token on its own: permuting the micro-batch's tokens permutes
// the outputs the same way.
TEST(MoeLayerOrder, DroplessOutputsFollowAPermutationOfTheTokens) {
  const MoeSpec s = kCases[0].spec;
  const std::vector<float> p = Parameters(s, 21);
  LayerRun base(s, p);
  ASSERT_TRUE(base.Forward().ok());
  std::vector<int64_t> perm(kN);
  std::iota(perm.begin(), perm.end(), 0);
  std::reverse(perm.begin(), perm.end());
  std::rotate(perm.begin(), perm.begin() + 5, perm.end());
  std::vector<float> q = p;
  for (int64_t t = 0; t < kN; ++t)
    std::copy(p.begin() + perm[t] * kC, p.begin() + (perm[t] + 1) * kC, q.begin() + t * kC);
  LayerRun permuted(s, q);
  ASSERT_TRUE(permuted.Forward().ok());
  const std::vector<float> a = base.Out(), b = permuted.Out();
  for (int64_t t = 0; t < kN; ++t)
    for (int64_t c = 0; c < kC; ++c)
      EXPECT_NEAR(b[t * kC + c], a[perm[t] * kC + c], 1e-6) << "token " << t;
}

// The dispatch: a stable counting sort by expert; with a capacity, each expert keeps its first
// tokens in token order.
TEST(MoeDispatchPlan, GroupsByExpertInTokenOrderAndDropsTheLaterTokens) {
  MoeSpec s;
  s.num_experts = 3;
  s.top_k = 2;
  const std::vector<int32_t> experts = {0, 2, 0, 1, 0, 2, 1, 2};  // 4 tokens
  MoeDispatch d;
  std::vector<int32_t> planned;
  PlanMoeDispatch(s, experts.data(), 4, &planned, &d);
  EXPECT_EQ(d.counts, (std::vector<int32_t>{3, 2, 3}));
  EXPECT_EQ(d.offsets, (std::vector<int64_t>{0, 3, 5, 8}));
  EXPECT_EQ(planned, (std::vector<int32_t>{0, 5, 1, 3, 2, 6, 4, 7}));
  s.capacity_factor = 0.7;  // ceil(0.7 * 4 * 2 / 3) = 2 per expert
  EXPECT_EQ(MoeCapacity(s, 4), 2);
  PlanMoeDispatch(s, experts.data(), 4, &planned, &d);
  EXPECT_EQ(d.offsets, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(planned, (std::vector<int32_t>{0, 4, 1, 2, -1, 5, 3, -1}));
  EXPECT_EQ(d.dropped, 2);
  // A factor past E / K keeps every choice; one whose product overflows int64 too (the capacity
  // stops at the tokens: an expert gets at most a row a token), as dropless does.
  for (double factor : {1.5, 3e17, 1e300}) {
    s.capacity_factor = factor;
    EXPECT_EQ(MoeCapacity(s, 4), 4) << factor;
    PlanMoeDispatch(s, experts.data(), 4, &planned, &d);
    EXPECT_EQ(planned, (std::vector<int32_t>{0, 5, 1, 3, 2, 6, 4, 7})) << factor;
    EXPECT_EQ(d.dropped, 0) << factor;
  }
  // A shared expert: every token's third slot, after the routed rows.
  s.capacity_factor = 0;
  s.shared_ffn = 4;
  PlanMoeDispatch(s, experts.data(), 4, &planned, &d);
  EXPECT_EQ(planned, (std::vector<int32_t>{0, 5, 8, 1, 3, 9, 2, 6, 10, 4, 7, 11}));
  // The backend's op (what the layer's forward runs) gives those slots and counts.
  auto be = MakeCpuBackend();
  std::vector<int32_t> in = experts, slots(12, -7), counts(3, -7);
  ASSERT_TRUE(be->MoeDispatchSlots(Tensor(slots.data(), DType::kI32, {4, 3}),
                                   Tensor(counts.data(), DType::kI32, {3}),
                                   Tensor(in.data(), DType::kI32, {4, 2}), 0)
                  .ok());
  EXPECT_EQ(slots, (std::vector<int32_t>{0, 5, 8, 1, 3, 9, 2, 6, 10, 4, 7, 11}));
  EXPECT_EQ(counts, (std::vector<int32_t>{3, 2, 3}));
  // A choice of no expert (an id outside [0, E), here -1) is dropped, not counted.
  in[3] = -1;
  ASSERT_TRUE(be->MoeDispatchSlots(Tensor(slots.data(), DType::kI32, {4, 3}),
                                   Tensor(counts.data(), DType::kI32, {3}),
                                   Tensor(in.data(), DType::kI32, {4, 2}), 0)
                  .ok());
  EXPECT_EQ(counts, (std::vector<int32_t>{3, 1, 3}));
  EXPECT_EQ(slots, (std::vector<int32_t>{0, 4, 8, 1, -1, 9, 2, 5, 10, 3, 6, 11}));
  EXPECT_FALSE(be->MoeDispatchSlots(Tensor(slots.data(), DType::kI32, {4, 3}),
                                    Tensor(counts.data(), DType::kI32, {1}),
                                    Tensor(in.data(), DType::kI32, {4, 2}), 0)
                   .ok())
      << "2 choices of 1 expert";
}

// Router scores of NaN (a diverged step) still choose K distinct experts: NaN ranks below every
// number, ties by the lower index, as the GPU router does (cuda_moe_test), so the dispatch never
// sees one expert twice for a token.
TEST(MoeRouterChoice, NanScoresRankBelowEveryNumber) {
  const float nan = std::nanf("");
  const int64_t N = 3;
  const int E = 6, K = 3;
  // Row 0: all NaN; row 1: two NaN among numbers; row 2: numbers.
  std::vector<float> logits = {nan, nan, nan, nan, nan, nan,   //
                               nan, 1.f, 5.f, nan, 3.f, 2.f,   //
                               0.5f, -1.f, 2.f, 0.f, 1.f, 3.f};
  auto be = MakeCpuBackend();
  for (bool pre_softmax : {true, false}) {
    SCOPED_TRACE(pre_softmax ? "softmax, then top-k" : "top-k of the logits (Mixtral)");
    std::vector<float> weights(N * K), probs(N * E), lse(N);
    std::vector<int32_t> experts(N * K, -7);
    MoeRouting r;
    r.top_k = K;
    r.pre_softmax = pre_softmax;
    ASSERT_TRUE(be->MoeRouterForward(Tensor(weights.data(), DType::kF32, {N, K}),
                                     Tensor(experts.data(), DType::kI32, {N, K}),
                                     Tensor(probs.data(), DType::kF32, {N, E}),
                                     Tensor(lse.data(), DType::kF32, {N}),
                                     Tensor(logits.data(), DType::kF32, {N, E}), Tensor(), r)
                    .ok());
    // A NaN logit makes the whole softmax row NaN: then the lowest indices.
    const std::vector<int32_t> row1 =
        pre_softmax ? std::vector<int32_t>{0, 1, 2} : std::vector<int32_t>{2, 4, 5};
    EXPECT_EQ(std::vector<int32_t>(experts.begin(), experts.begin() + 3),
              (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(std::vector<int32_t>(experts.begin() + 3, experts.begin() + 6), row1);
    EXPECT_EQ(std::vector<int32_t>(experts.begin() + 6, experts.end()),
              (std::vector<int32_t>{2, 4, 5}));
  }
}

}  // namespace
}  // namespace trainer
