// GPU tests of the CUDA backend's mixture-of-experts ops against their CPU twins (cpu/moe.cpp):
// - the router forward (f32 on both): the chosen experts exactly, the scores, weights and
//   logsumexp within f32 rounding, over softmax and sigmoid scores, top-k after or before the
//   softmax, norm_topk_prob, the shared expert's gate, the expert bias (f32, and the GPU model's
//   bf16 copy), and logits drawn from a few values so that scores tie (the lower expert index
//   must win, as on the CPU);
// - the router backward (aux loss per micro-batch and per sequence, z-loss);
// - scatter, gather (the weighted combine, and the permutation's backward accumulating), slot
//   dots, over dispatch plans from the host planner (PlanMoeDispatch): random routing, empty
//   experts, every token on expert 0, a shared expert, and slots dropped by a capacity; the
//   dispatch's slots and counts made on the device (MoeDispatchSlots) against that planner.
// - the router GEMM's f32 logits on the bf16 backend, and the experts' GEMMs over ragged row
//   groups (untimed cuBLASLt heuristic choice, no route recorded; a call at its size class's own
//   sizes after a smaller call of the class runs at its own).
// Odd sizes: N not a multiple of 32, E = 5, K = 3, C = 72 and 75 (16-byte chunks and single
// elements); E = 12, K = 9 at C = 2048, 80 and 75; the row kernels also on an f32 backend. The
// combine is deterministic: two runs agree bit for bit.
#include <cmath>

#include "cuda_test_util.h"
#include "model/moe_layer.h"

namespace trainer {
namespace cuda_testing {
namespace {

struct RouterCase {
  const char* name;
  int64_t N;
  int E, K;
  bool sigmoid, pre_softmax, norm_topk_prob, shared_gate, bias, ties;
  int groups;  // of the aux loss's coefficients (1: per micro-batch)
};
constexpr RouterCase kRouterCases[] = {
    {"softmax pre", 37, 5, 3, false, true, false, false, false, false, 1},
    {"softmax pre norm ties", 37, 5, 3, false, true, true, false, false, true, 1},
    {"mixtral top-k then softmax", 37, 5, 3, false, false, false, false, false, false, 1},
    {"mixtral ties", 37, 5, 3, false, false, false, false, false, true, 1},
    {"sigmoid norm bias", 37, 5, 3, true, true, true, false, true, false, 1},
    {"sigmoid ties shared", 37, 5, 3, true, true, false, true, false, true, 1},
    {"softmax shared bias per sequence", 36, 5, 3, false, true, true, true, true, false, 4},
    {"olmoe 64 top 8", 301, 64, 8, false, true, false, false, false, false, 1},
    {"top 1 of 5", 33, 5, 1, false, true, false, true, false, true, 1},
};

class CudaMoeTest : public CudaVsCpuTest {
 protected:
  std::vector<int32_t> DownloadInts(const DeviceBuffer& b, size_t n) {
    std::vector<int32_t> out(n);
    EXPECT_TRUE(gpu_->CopyToHost(out.data(), b.tensor().data, n * 4).ok());
    return out;
  }
  // Logits (N,E2): random, or from {-1, -0.5, 0, 0.5, 1} so that many scores tie.
  std::vector<float> Logits(const RouterCase& c, int E2) {
    std::vector<float> z = RandomFloats(c.N * E2, rng_, -3.f, 3.f);
    if (c.ties)
      for (float& v : z) v = std::round(v / 1.5f) * 0.5f;
    return z;
  }
};

TEST_F(CudaMoeTest, RouterForwardAndBackwardMatchCpu) {
  for (const RouterCase& c : kRouterCases) {
    SCOPED_TRACE(std::string(c.name) + ", " + Trace());
    const int64_t N = c.N;
    const int E = c.E, K = c.K, E2 = E + c.shared_gate, K2 = K + c.shared_gate;
    const MoeRouting r{c.K, c.sigmoid, c.pre_softmax, c.norm_topk_prob, c.shared_gate};
    std::vector<float> logits = Logits(c, E2);
    // bf16 values, so that the GPU's bf16 parameter copy holds the same bias as the f32 one.
    std::vector<float> bias =
        c.bias ? Rounded(RandomFloats(E, rng_, -0.05f, 0.05f), DType::kBF16) : std::vector<float>();
    // CPU reference.
    std::vector<float> weights(N * K2), probs(N * E), lse(N);
    std::vector<int32_t> experts(N * K);
    ASSERT_STATUS_OK(cpu_->MoeRouterForward(
        HostView(weights, {N, K2}), HostView(experts, {N, K}), HostView(probs, {N, E}),
        HostView(lse, {N}), HostView(logits, {N, E2}), c.bias ? HostView(bias, {E}) : Tensor(), r));
    // GPU.
    auto g_logits = F32(logits, {N, E2}), g_weights = F32(std::vector<float>(N * K2), {N, K2}),
         g_probs = F32(std::vector<float>(N * E), {N, E}), g_lse = F32(std::vector<float>(N), {N});
    auto g_experts = Ints(std::vector<int32_t>(N * K), {N, K});
    // The bias as f32, and as the bf16 parameter copy the GPU model passes.
    for (bool bf16_bias : {false, true}) {
      if (bf16_bias && !c.bias) break;
      SCOPED_TRACE(bf16_bias ? "bf16 bias" : "f32 bias");
      auto g_bias = !c.bias ? nullptr : bf16_bias ? Compute(bias, {E}) : F32(bias, {E});
      ASSERT_STATUS_OK(gpu_->MoeRouterForward(
          g_weights->tensor(), g_experts->tensor(), g_probs->tensor(), g_lse->tensor(),
          g_logits->tensor(), c.bias ? g_bias->tensor() : Tensor(), r));
      EXPECT_EQ(DownloadInts(*g_experts, N * K), experts) << "the chosen experts";
      EXPECT_RELATIVE_ERROR_BELOW(g_weights->Download(), weights, 1e-5);
      EXPECT_RELATIVE_ERROR_BELOW(g_probs->Download(), probs, 1e-5);
      EXPECT_RELATIVE_ERROR_BELOW(g_lse->Download(), lse, 1e-5);
    }

    // Backward from the CPU's forward (the same inputs on both), with the aux and z losses.
    std::vector<float> dweights = RandomFloats(N * K2, rng_);
    std::vector<float> aux = RandomFloats(c.groups * E, rng_, 0.f, 0.1f);
    const float z_scale = 1e-3f;
    std::vector<float> dlogits(N * E2);
    ASSERT_STATUS_OK(cpu_->MoeRouterBackward(
        HostView(dlogits, {N, E2}), HostView(dweights, {N, K2}), HostView(logits, {N, E2}),
        HostView(probs, {N, E}), HostView(experts, {N, K}), HostView(weights, {N, K2}),
        HostView(aux, {c.groups, E}), z_scale, r));
    auto g_dweights = F32(dweights, {N, K2}), g_aux = F32(aux, {c.groups, E});
    auto g_probs_cpu = F32(probs, {N, E}), g_weights_cpu = F32(weights, {N, K2});
    auto g_experts_cpu = Ints(experts, {N, K});
    auto g_dlogits = F32(std::vector<float>(N * E2, 7.f), {N, E2});  // overwritten
    auto backward = [&] {
      return gpu_->MoeRouterBackward(g_dlogits->tensor(), g_dweights->tensor(), g_logits->tensor(),
                                     g_probs_cpu->tensor(), g_experts_cpu->tensor(),
                                     g_weights_cpu->tensor(), g_aux->tensor(), z_scale, r);
    };
    ASSERT_STATUS_OK(backward());
    const std::vector<float> got = g_dlogits->Download();
    EXPECT_RELATIVE_ERROR_BELOW(got, dlogits, 1e-4);
    ASSERT_STATUS_OK(backward());
    EXPECT_BITWISE_EQUAL(g_dlogits->Download(), got) << "dlogits, two identical runs";
  }
}

// Routings of N tokens to K of E experts (ascending per token), as the router hands them over.
std::vector<int32_t> Routed(const char* how, int64_t N, int E, int K, std::mt19937& rng) {
  std::vector<int32_t> experts(N * K);
  const std::string h = how;
  for (int64_t t = 0; t < N; ++t) {
    std::vector<int> pool;
    for (int e = 0; e < E; ++e)
      if (h != "empty experts" || e % 2 == 0) pool.push_back(e);  // experts 1, 3 get none
    std::shuffle(pool.begin(), pool.end(), rng);
    if (h == "all on expert 0") std::swap(*std::find(pool.begin(), pool.end(), 0), pool[0]);
    std::sort(pool.begin(), pool.begin() + K);
    for (int k = 0; k < K; ++k) experts[t * K + k] = pool[k];
  }
  return experts;
}

struct RowsCase {
  const char* routing;
  int64_t N, C;
  int E, K;
  bool shared;
  double capacity_factor;
};
constexpr RowsCase kRowsCases[] = {
    {"random", 37, 72, 5, 3, false, 0.0},
    {"empty experts", 37, 72, 5, 3, false, 0.0},
    {"all on expert 0", 37, 75, 5, 3, true, 0.0},
    {"random", 45, 72, 5, 3, true, 0.5},
    {"all on expert 0", 33, 72, 5, 3, false, 0.7},
    {"random", 29, 2048, 12, 9, true, 0.0},  // OLMoE's width, K' = 10: three batches of loads
    {"random", 31, 80, 12, 9, false, 0.8},   // a capacity dropping some of a token's 9
    {"random", 23, 75, 12, 9, true, 0.0},    // single elements, K' = 10
};

// The dispatch on the device against the host planner: slots and counts to the bit, over several
// chunks of 256 tokens and a partial one, empty experts, every token on expert 0, a capacity that
// drops, a shared expert, 160 and 1536 experts (the widest bitmap), 1600 (past it: the host path),
// a whole number of chunks, and choices of no expert (ids outside [0, E): dropped, not counted).
struct DispatchCase {
  const char* routing;
  int64_t N;
  int E, K;
  bool shared;
  double capacity_factor;
};
constexpr DispatchCase kDispatchCases[] = {
    {"random", 37, 5, 3, false, 0.0},         {"random", 1000, 64, 8, false, 0.0},
    {"empty experts", 777, 5, 2, true, 0.0},  {"all on expert 0", 600, 8, 2, false, 0.0},
    {"random", 513, 64, 8, true, 0.6},        {"all on expert 0", 300, 5, 3, true, 0.7},
    {"random", 2049, 160, 6, false, 0.0},     {"random", 301, 1600, 2, false, 1.0},
    {"random", 512, 1536, 4, true, 0.0},      {"all on expert 0", 256, 8, 2, true, 0.0},
    {"no expert", 700, 16, 4, false, 0.0},    {"no expert", 300, 16, 4, true, 0.5},
};

TEST_F(CudaMoeTest, DispatchSlotsMatchTheHostPlan) {
  for (const DispatchCase& c : kDispatchCases) {
    SCOPED_TRACE(StrFormat("%s N=%lld E=%d K=%d shared=%d capacity=%.1f", c.routing,
                           (long long)c.N, c.E, c.K, c.shared, c.capacity_factor));
    MoeSpec spec;
    spec.num_experts = c.E;
    spec.top_k = c.K;
    spec.shared_ffn = c.shared ? 8 : 0;
    spec.capacity_factor = c.capacity_factor;
    const bool no_expert = std::string(c.routing) == "no expert";
    std::vector<int32_t> experts = Routed(no_expert ? "random" : c.routing, c.N, c.E, c.K, rng_);
    for (size_t i = 0; no_expert && i < experts.size(); i += 7) experts[i] = -1;
    MoeDispatch d;
    std::vector<int32_t> planned;
    PlanMoeDispatch(spec, experts.data(), c.N, &planned, &d);
    if (c.capacity_factor > 0 && c.capacity_factor < 1) {
      EXPECT_GT(d.dropped, 0);
    } else if (no_expert) {
      EXPECT_EQ(d.offsets.back(), c.N * c.K - (c.N * c.K + 6) / 7) << "every 7th choice dropped";
    }
    const int K2 = c.K + (c.shared ? 1 : 0);
    auto g_experts = Ints(experts, {c.N, c.K});
    auto g_slots = Ints(std::vector<int32_t>(c.N * K2, -7), {c.N, K2});
    auto g_counts = Ints(std::vector<int32_t>(c.E, -7), {c.E});
    ASSERT_STATUS_OK(gpu_->MoeDispatchSlots(g_slots->tensor(), g_counts->tensor(),
                                            g_experts->tensor(), MoeCapacity(spec, c.N)));
    EXPECT_EQ(DownloadInts(*g_slots, c.N * K2), planned);
    EXPECT_EQ(DownloadInts(*g_counts, c.E), d.counts);
  }
}

TEST_F(CudaMoeTest, ScatterGatherAndSlotDotsMatchCpu) {
  // On the bf16 backend, then on an f32 one (4 values to a 16-byte chunk).
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kF32, &gpu_));
    for (const RowsCase& c : kRowsCases) {
      SCOPED_TRACE(StrFormat("%s N=%lld C=%lld shared=%d capacity=%.1f %s, ", c.routing,
                             (long long)c.N, (long long)c.C, c.shared, c.capacity_factor,
                             DTypeName(gpu_->compute_dtype())) +
                   Trace());
      const int64_t N = c.N, C = c.C;
      MoeSpec spec;
      spec.num_experts = c.E;
      spec.top_k = c.K;
      spec.shared_ffn = c.shared ? 8 : 0;
      spec.capacity_factor = c.capacity_factor;
      MoeDispatch d;
      const std::vector<int32_t> experts = Routed(c.routing, N, c.E, c.K, rng_);
      std::vector<int32_t> slots;
      PlanMoeDispatch(spec, experts.data(), N, &slots, &d);
      if (c.capacity_factor > 0) {
        EXPECT_GT(d.dropped, 0) << "the case must drop slots";
      }
      const int K2 = c.K + (c.shared ? 1 : 0);
      const int64_t M = N * K2;
      std::vector<float> tokens = Random(N * C), rows0 = Random(M * C), dout = Random(N * C);
      std::vector<float> w = RandomFloats(N * K2, rng_, 0.f, 1.f);
      auto g_slots = Ints(slots, {N, K2});
      auto g_w = F32(w, {N, K2});
      for (bool weighted : {false, true}) {
        SCOPED_TRACE(weighted ? "weighted" : "unweighted");
        const Tensor cw = weighted ? HostView(w, {N, K2}) : Tensor();
        const Tensor gw = weighted ? g_w->tensor() : Tensor();
        // Scatter: rows no slot names keep their values.
        std::vector<float> rows = rows0;
        ASSERT_STATUS_OK(cpu_->MoeScatterRows(HostView(rows, {M, C}), HostView(tokens, {N, C}),
                                              HostView(slots, {N, K2}), cw));
        auto g_rows = Compute(rows0, {M, C}), g_tokens = Compute(tokens, {N, C});
        ASSERT_STATUS_OK(
            gpu_->MoeScatterRows(g_rows->tensor(), g_tokens->tensor(), g_slots->tensor(), gw));
        EXPECT_RELATIVE_ERROR_BELOW(g_rows->Download(), Rounded(rows, gpu_->compute_dtype()), 0.0);
        // Gather (overwrite, then accumulate) from the rows both sides hold.
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
          std::vector<float> out = dout;
          ASSERT_STATUS_OK(cpu_->MoeGatherRows(HostView(out, {N, C}), HostView(rows0, {M, C}),
                                               HostView(slots, {N, K2}), cw, accumulate));
          auto g_in = Compute(rows0, {M, C}), g_out = Compute(dout, {N, C});
          ASSERT_STATUS_OK(gpu_->MoeGatherRows(g_out->tensor(), g_in->tensor(), g_slots->tensor(),
                                               gw, accumulate));
          const std::vector<float> got = g_out->Download();
          EXPECT_RELATIVE_ERROR_BELOW(got, out, 1e-2);
          ASSERT_TRUE(g_out->Upload(dout).ok());
          ASSERT_STATUS_OK(gpu_->MoeGatherRows(g_out->tensor(), g_in->tensor(), g_slots->tensor(),
                                               gw, accumulate));
          EXPECT_BITWISE_EQUAL(g_out->Download(), got) << "the combine, two identical runs";
        }
      }
      // Slot dots (0 where dropped).
      std::vector<float> dw(N * K2, 5.f);
      ASSERT_STATUS_OK(cpu_->MoeSlotDots(HostView(dw, {N, K2}), HostView(dout, {N, C}),
                                         HostView(rows0, {M, C}), HostView(slots, {N, K2})));
      auto g_dw = F32(std::vector<float>(N * K2, 5.f), {N, K2});
      auto g_dout = Compute(dout, {N, C}), g_rows = Compute(rows0, {M, C});
      ASSERT_STATUS_OK(
          gpu_->MoeSlotDots(g_dw->tensor(), g_dout->tensor(), g_rows->tensor(), g_slots->tensor()));
      const std::vector<float> got_dw = g_dw->Download();
      EXPECT_RELATIVE_ERROR_BELOW(got_dw, dw, 1e-5);
      for (int64_t i = 0; i < N * K2; ++i) {
        if (slots[i] < 0) {
          EXPECT_EQ(got_dw[i], 0.f) << "dropped slot " << i;
        }
      }
    }
  }
}

// Scores of NaN (a diverged step): the GPU router chooses the CPU's K distinct experts (NaN
// below every number, ties by the lower index), never one expert twice or none.
TEST_F(CudaMoeTest, RouterChoicesOfNanScoresMatchCpu) {
  SCOPED_TRACE(Trace());
  const int64_t N = 40;
  const int E = 8, K = 3;
  std::vector<float> logits = RandomFloats(N * E, rng_, -3.f, 3.f);
  for (int e = 0; e < E; ++e) logits[e] = std::nanf("");               // row 0 all NaN
  for (int64_t t = 1; t < N; t += 3) logits[t * E + (t % E)] = std::nanf("");  // one NaN
  for (bool pre_softmax : {true, false}) {
    SCOPED_TRACE(pre_softmax ? "softmax, then top-k" : "top-k of the logits");
    MoeRouting r;
    r.top_k = K;
    r.pre_softmax = pre_softmax;
    std::vector<float> weights(N * K), probs(N * E), lse(N);
    std::vector<int32_t> experts(N * K);
    ASSERT_STATUS_OK(cpu_->MoeRouterForward(
        HostView(weights, {N, K}), HostView(experts, {N, K}), HostView(probs, {N, E}),
        HostView(lse, {N}), HostView(logits, {N, E}), Tensor(), r));
    auto g_logits = F32(logits, {N, E}), g_weights = F32(std::vector<float>(N * K), {N, K}),
         g_probs = F32(std::vector<float>(N * E), {N, E}), g_lse = F32(std::vector<float>(N), {N});
    auto g_experts = Ints(std::vector<int32_t>(N * K), {N, K});
    ASSERT_STATUS_OK(gpu_->MoeRouterForward(g_weights->tensor(), g_experts->tensor(),
                                            g_probs->tensor(), g_lse->tensor(),
                                            g_logits->tensor(), Tensor(), r));
    const std::vector<int32_t> got = DownloadInts(*g_experts, N * K);
    EXPECT_EQ(got, experts) << "the chosen experts";
    for (int64_t t = 0; t < N; ++t)
      for (int k = 0; k < K; ++k) {
        ASSERT_GE(got[t * K + k], 0) << "row " << t;
        if (k > 0) {
          ASSERT_GT(got[t * K + k], got[t * K + k - 1]) << "row " << t;
        }
      }
  }
}

// The router's f32 logits on a bf16 backend: MatmulForward into f32 and MatmulBackward from an
// f32 dout, against the CPU on the same bf16-rounded x and W.
TEST_F(CudaMoeTest, RouterMatmulWithF32LogitsMatchesCpu) {
  const int64_t N = 45, C = 72, E = 5;
  std::vector<float> x = Random(N * C), wr = Random(E * C), dz = RandomFloats(N * E, rng_);
  std::vector<float> z(N * E), dx(N * C), dwr(E * C, 0.f);
  ASSERT_STATUS_OK(cpu_->MatmulForward(HostView(z, {N, E}), Tensor(), HostView(x, {N, C}),
                                       HostView(wr, {E, C}), Tensor(), Activation::kNone));
  ASSERT_STATUS_OK(cpu_->MatmulBackward(HostView(dx, {N, C}), HostView(dwr, {E, C}), Tensor(),
                                        HostView(dz, {N, E}), HostView(x, {N, C}),
                                        HostView(wr, {E, C}), GradientWrite::kAccumulate));
  auto g_x = Compute(x, {N, C}), g_w = Compute(wr, {E, C});
  auto g_z = F32(std::vector<float>(N * E), {N, E}), g_dz = F32(dz, {N, E});
  auto g_dx = Compute(std::vector<float>(N * C), {N, C});
  auto g_dw = F32(std::vector<float>(E * C, 0.f), {E, C});
  ASSERT_STATUS_OK(gpu_->MatmulForward(g_z->tensor(), Tensor(), g_x->tensor(), g_w->tensor(),
                                       Tensor(), Activation::kNone));
  EXPECT_RELATIVE_ERROR_BELOW(g_z->Download(), z, 1e-5);  // f32 out: no bf16 rounding
  ASSERT_STATUS_OK(gpu_->MatmulBackward(g_dx->tensor(), g_dw->tensor(), Tensor(), g_dz->tensor(),
                                        g_x->tensor(), g_w->tensor(), GradientWrite::kAccumulate));
  EXPECT_RELATIVE_ERROR_BELOW(g_dx->Download(), dx, 1e-2);  // dz rounded to bf16 first
  EXPECT_RELATIVE_ERROR_BELOW(g_dw->Download(), dwr, 1e-2);
}

// The experts' GEMMs over ragged row groups (Backend::SetRaggedGroups): cuBLASLt's heuristic
// choice, untimed and unrecorded, with the same result as the CPU; a plain call of a new shape
// afterwards is timed and recorded again.
TEST_F(CudaMoeTest, RaggedGroupGemmsAreUntimedAndMatchCpu) {
  const int64_t C = 72, F = 40;
  std::vector<float> w = Random(F * C);
  auto g_w = Compute(w, {F, C});
  const size_t routes_before = gpu_->routes()->entries().size();
  gpu_->SetRaggedGroups(true);
  for (int64_t n : {1, 7, 37, 129}) {
    SCOPED_TRACE(StrFormat("n=%lld, ", (long long)n) + Trace());
    std::vector<float> x = Random(n * C), y(n * F);
    ASSERT_STATUS_OK(cpu_->MatmulForward(HostView(y, {n, F}), Tensor(), HostView(x, {n, C}),
                                         HostView(w, {F, C}), Tensor(), Activation::kNone));
    auto g_x = Compute(x, {n, C}), g_y = Compute(std::vector<float>(n * F), {n, F});
    ASSERT_STATUS_OK(gpu_->MatmulForward(g_y->tensor(), Tensor(), g_x->tensor(), g_w->tensor(),
                                         Tensor(), Activation::kNone));
    EXPECT_RELATIVE_ERROR_BELOW(g_y->Download(), y, 1e-2);
  }
  gpu_->SetRaggedGroups(false);
  EXPECT_EQ(gpu_->routes()->entries().size(), routes_before) << "ragged GEMMs recorded routes";
  std::vector<float> x = Random(53 * C);
  auto g_x = Compute(x, {53, C}), g_y = Compute(std::vector<float>(53 * F), {53, F});
  ASSERT_STATUS_OK(gpu_->MatmulForward(g_y->tensor(), Tensor(), g_x->tensor(), g_w->tensor(),
                                       Tensor(), Activation::kNone));
  EXPECT_EQ(gpu_->routes()->entries().size(), routes_before + 1) << "a plain GEMM's route";
}

// Ragged GEMMs whose sizes share a power-of-two class share one plan, which runs each call at the
// call's own sizes: a call at exactly the class's size (128, 4, 512 rows) right after a smaller
// one of the class (100, 3, 300) must run all its rows, forward, input gradient and the weight
// gradient summed over them (C and F powers of two, so that the classes apply).
TEST_F(CudaMoeTest, RaggedGroupGemmsRunAtEachCallsOwnSize) {
  const int64_t C = 64, F = 128;
  std::vector<float> w = Random(F * C);
  auto g_w = Compute(w, {F, C});
  gpu_->SetRaggedGroups(true);
  for (int64_t n : {100, 128, 3, 4, 300, 512, 2, 1, 2}) {
    SCOPED_TRACE(StrFormat("n=%lld, ", (long long)n) + Trace());
    std::vector<float> x = Random(n * C), dy = Random(n * F), y(n * F), dx(n * C), dw(F * C);
    ASSERT_STATUS_OK(cpu_->MatmulForward(HostView(y, {n, F}), Tensor(), HostView(x, {n, C}),
                                         HostView(w, {F, C}), Tensor(), Activation::kNone));
    ASSERT_STATUS_OK(cpu_->MatmulBackward(HostView(dx, {n, C}), HostView(dw, {F, C}), Tensor(),
                                          HostView(dy, {n, F}), HostView(x, {n, C}),
                                          HostView(w, {F, C}), GradientWrite::kOverwrite));
    auto g_x = Compute(x, {n, C}), g_dy = Compute(dy, {n, F});
    auto g_y = Compute(std::vector<float>(n * F), {n, F});
    auto g_dx = Compute(std::vector<float>(n * C), {n, C});
    auto g_dw = F32(std::vector<float>(F * C), {F, C});
    ASSERT_STATUS_OK(gpu_->MatmulForward(g_y->tensor(), Tensor(), g_x->tensor(), g_w->tensor(),
                                         Tensor(), Activation::kNone));
    ASSERT_STATUS_OK(gpu_->MatmulBackward(g_dx->tensor(), g_dw->tensor(), Tensor(), g_dy->tensor(),
                                          g_x->tensor(), g_w->tensor(),
                                          GradientWrite::kOverwrite));
    EXPECT_RELATIVE_ERROR_BELOW(g_y->Download(), y, 1e-2);
    EXPECT_RELATIVE_ERROR_BELOW(g_dx->Download(), dx, 1e-2);
    EXPECT_RELATIVE_ERROR_BELOW(g_dw->Download(), dw, 1e-2);
  }
  gpu_->SetRaggedGroups(false);
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
