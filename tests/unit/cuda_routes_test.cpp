// Routes pinned through a route table (Engine.gpu_routes' file, model/route_table.h): every
// candidate of the GELU GEMM's forward and gradient, cuBLASLt's algorithms, cuDNN's plans and
// attention's two routes, each forced by a pin on a fresh backend, against the CPU fp32 path;
// the automatic choice follows the route policy on its own times; pins that do not apply are
// refused with one line naming the file, op, shape and candidate.
#include <algorithm>

#include "cuda_test_util.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/matmul.h"
#include "model/route_policy.h"

namespace trainer {
namespace cuda_testing {
namespace {

constexpr const char* kPinsFile = "test-pins.json";

// One pinned route per (op, shape, candidate), parsed as a routes file would be.
RouteTable Pins(const std::vector<std::tuple<std::string, std::string, std::string>>& routes) {
  RouteTable table;
  for (const auto& [op, shape, candidate] : routes)
    table.Record({op, shape, {{candidate, -1.f}}, 0, "pinned"});
  RouteTable parsed;
  EXPECT_TRUE(RouteTable::Parse(table.ToJson(), kPinsFile, &parsed).ok());
  return parsed;
}

// The MLP's GEMMs with a GELU on one backend: out = GELU(in W^T + b) (N, OC) and din (N, C) =
// GELU'(in) * (dout W), with din's column sums; the last of `calls` calls of each.
struct MlpResult {
  std::vector<float> out, din, sums;
  Status status;
};
constexpr int N = 256, C = 256, OC = 512;

class CudaRoutesTest : public CudaVsCpuTest {
 protected:
  void SetUp() override {
    CudaVsCpuTest::SetUp();
    in_ = Random(N * C), weight_ = Random(OC * C, -0.2f, 0.2f), bias_ = Random(OC);
    dout_ = Random(N * OC);
    std::vector<float> pre(N * OC), dw(OC * C), db(OC);
    want_.out.assign(N * OC, 0.f), want_.din.assign(N * C, 0.f), want_.sums.assign(C, 0.f);
    ASSERT_STATUS_OK(cpu_->MatmulForward(HostView(want_.out, {N, OC}), HostView(pre, {N, OC}),
                                         HostView(in_, {N, C}), HostView(weight_, {OC, C}),
                                         HostView(bias_, {OC}), Activation::kGelu));
    ASSERT_STATUS_OK(cpu_->MatmulBackwardThroughGelu(
        HostView(want_.din, {N, C}), HostView(dw, {OC, C}), HostView(db, {OC}),
        HostView(dout_, {N, OC}), HostView(in_, {N, C}), HostView(weight_, {OC, C}),
        HostView(in_, {N, C}), HostView(want_.sums, {C}), GradientWrite::kAccumulate));
  }

  MlpResult RunMlp(CudaBackend* gpu, int forward_calls, int backward_calls) {
    MlpResult r;
    const DType dt = gpu->compute_dtype();
    DeviceBuffer in(gpu, dt, {N, C}), w(gpu, dt, {OC, C}), b(gpu, dt, {OC}), out(gpu, dt, {N, OC}),
        pre(gpu, dt, {N, OC}), dout(gpu, dt, {N, OC}), din(gpu, dt, {N, C}),
        dw(gpu, DType::kF32, {OC, C}), db(gpu, DType::kF32, {OC}), sums(gpu, DType::kF32, {C});
    r.status = in.Upload(in_);
    if (r.status.ok()) r.status = w.Upload(weight_);
    if (r.status.ok()) r.status = b.Upload(bias_);
    if (r.status.ok()) r.status = dout.Upload(dout_);
    for (int call = 0; call < forward_calls && r.status.ok(); ++call)
      r.status = gpu->MatmulForward(out.tensor(), pre.tensor(), in.tensor(), w.tensor(), b.tensor(),
                                    Activation::kGelu);
    for (int call = 0; call < backward_calls && r.status.ok(); ++call) {
      r.status = sums.Upload(std::vector<float>(C, 0.f));
      if (r.status.ok())
        r.status = gpu->MatmulBackwardThroughGelu(
            din.tensor(), dw.tensor(), db.tensor(), dout.tensor(), in.tensor(), w.tensor(),
            in.tensor(), sums.tensor(), GradientWrite::kOverwrite);
    }
    if (r.status.ok()) r.out = out.Download(), r.din = din.Download(), r.sums = sums.Download();
    return r;
  }

  std::unique_ptr<CudaBackend> Pinned(const RouteTable& pins) {
    std::unique_ptr<CudaBackend> gpu;
    EXPECT_TRUE(CudaBackend::Create(0, DType::kBF16, &gpu).ok());
    const Status s = gpu->PinRoutes(pins);
    EXPECT_TRUE(s.ok()) << s.message();
    return gpu;
  }

  // The entries of `op` in `gpu`'s table.
  static std::vector<RouteEntry> EntriesOf(const CudaBackend& gpu, const std::string& op) {
    std::vector<RouteEntry> out;
    for (const RouteEntry& e : gpu.routes()->entries())
      if (e.op == op) out.push_back(e);
    return out;
  }

  std::vector<float> in_, weight_, bias_, dout_;
  MlpResult want_;
};

// Enough backward calls to finish the gradient's trial (an untimed call, then the turns).
constexpr int kTrialCalls = 1 + 13 * RoutePolicy::kTimedRuns + 1;

TEST_F(CudaRoutesTest, AutomaticChoicesFollowThePolicy) {
  const MlpResult r = RunMlp(gpu_.get(), 2, kTrialCalls);
  ASSERT_STATUS_OK(r.status);
  EXPECT_RELATIVE_ERROR_BELOW(r.out, want_.out, 1e-2);
  EXPECT_RELATIVE_ERROR_BELOW(r.din, want_.din, 1e-2);
  EXPECT_TRUE(gpu_->routes_settled());
  int timed = 0;
  for (const RouteEntry& e : gpu_->routes()->entries()) {
    SCOPED_TRACE(e.op + " " + e.shape);
    ASSERT_GE(e.chosen, 0);
    if (e.how != "timed") continue;
    ++timed;
    std::vector<float> times;
    for (const RouteCandidate& c : e.candidates) times.push_back(c.ms);
    EXPECT_EQ(RouteChoice(times), e.chosen);  // the least time, ties to the first listed
  }
  EXPECT_GT(timed, 0);  // at least cuBLASLt's algorithms
  // Every candidate of a shape has a name of its own (cuBLASLt's: by configuration).
  for (const RouteEntry& e : gpu_->routes()->entries()) {
    std::vector<std::string> names;
    for (const RouteCandidate& c : e.candidates) names.push_back(c.name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(std::unique(names.begin(), names.end()), names.end()) << e.op << " " << e.shape;
    if (e.op == "cublaslt_gemm") {
      for (const std::string& name : names) EXPECT_TRUE(cuda::CublasLtMatmul::IsAlgoName(name));
    }
  }
  // cuBLASLt's GELU epilogue runs this shape, so its candidate was timed, not refused.
  const std::vector<RouteEntry> forward = EntriesOf(*gpu_, "gelu_gemm_forward");
  ASSERT_EQ(forward.size(), 1u);
  ASSERT_FALSE(forward[0].candidates.empty());
  EXPECT_EQ(forward[0].candidates[0].name, "cublaslt");
  EXPECT_GE(forward[0].candidates[0].ms, 0.f);
}

TEST_F(CudaRoutesTest, EveryGeluGemmCandidateCanBePinned) {
  ASSERT_STATUS_OK(RunMlp(gpu_.get(), 1, kTrialCalls).status);
  for (const char* op : {"gelu_gemm_forward", "gelu_gemm_gradient"}) {
    const std::vector<RouteEntry> entries = EntriesOf(*gpu_, op);
    ASSERT_EQ(entries.size(), 1u) << op;
    const RouteEntry& entry = entries[0];
    for (size_t c = 0; c < entry.candidates.size(); ++c) {
      const std::string& name = entry.candidates[c].name;
      // Candidates that ran in the trial (or the only one).
      if (entry.candidates[c].ms < 0 && static_cast<int>(c) != entry.chosen) continue;
      SCOPED_TRACE(std::string(op) + " pinned to " + name + " (" + entry.shape + "), " + Trace());
      std::unique_ptr<CudaBackend> gpu = Pinned(Pins({{op, entry.shape, name}}));
      constexpr int kCalls = 3;
      const MlpResult r = RunMlp(gpu.get(), kCalls, kCalls);
      ASSERT_STATUS_OK(r.status);
      EXPECT_RELATIVE_ERROR_BELOW(r.out, want_.out, 1e-2);
      EXPECT_RELATIVE_ERROR_BELOW(r.din, want_.din, 1e-2);
      EXPECT_RELATIVE_ERROR_BELOW(r.sums, want_.sums, 1e-2);
      const RouteEntry* taken = gpu->routes()->Find(op, entry.shape);
      ASSERT_NE(taken, nullptr);
      EXPECT_EQ(taken->how, "pinned");
      EXPECT_EQ(taken->chosen_name(), name);
      const CudaPathCounts& p = gpu->path_counts();
      if (std::string(op) == "gelu_gemm_forward") {
        EXPECT_EQ(p.gelu_sm90, name.rfind("sm90", 0) == 0 ? kCalls : 0);
        EXPECT_EQ(p.gelu_cudnn, name == "cudnn" ? kCalls : 0);
      } else {
        EXPECT_EQ(p.dgelu_sm90, name.rfind("sm90", 0) == 0 ? kCalls : 0);
      }
    }
  }
}

// Another rank's choice (the report's merged table) replaces this backend's from the shape's
// next call on.
TEST_F(CudaRoutesTest, AdoptedRoutesReplaceTheBackendsOwn) {
  ASSERT_STATUS_OK(RunMlp(gpu_.get(), 1, 0).status);
  const std::vector<RouteEntry> forward = EntriesOf(*gpu_, "gelu_gemm_forward");
  ASSERT_EQ(forward.size(), 1u);
  const RouteEntry& entry = forward[0];
  ASSERT_GE(entry.chosen, 0);
  // Another candidate that runs the shape, else the same one (then nothing changes).
  std::string other = entry.chosen_name();
  for (const RouteCandidate& c : entry.candidates)
    if (c.ms >= 0 && c.name != entry.chosen_name()) other = c.name;
  SCOPED_TRACE("adopting " + other + " for " + entry.shape + " instead of " + entry.chosen_name());
  RouteTable table;
  table.Record({entry.op, entry.shape, {{other, -1.f}}, 0, "timed"});
  ASSERT_STATUS_OK(gpu_->AdoptRoutes(table));
  const CudaPathCounts before = gpu_->path_counts();
  constexpr int kCalls = 2;
  const MlpResult r = RunMlp(gpu_.get(), kCalls, 0);
  ASSERT_STATUS_OK(r.status);
  EXPECT_RELATIVE_ERROR_BELOW(r.out, want_.out, 1e-2);
  EXPECT_EQ(gpu_->routes()->Find(entry.op, entry.shape)->chosen_name(), other);
  const CudaPathCounts& p = gpu_->path_counts();
  EXPECT_EQ(p.gelu_sm90 - before.gelu_sm90, other.rfind("sm90", 0) == 0 ? kCalls : 0);
  EXPECT_EQ(p.gelu_cudnn - before.gelu_cudnn, other == "cudnn" ? kCalls : 0);
}

TEST_F(CudaRoutesTest, CublasLtAlgorithmsAndCudnnPlansCanBePinned) {
  ASSERT_STATUS_OK(RunMlp(gpu_.get(), 1, 0).status);
  std::vector<RouteEntry> entries = EntriesOf(*gpu_, "cublaslt_gemm");
  ASSERT_FALSE(entries.empty());
  for (const RouteEntry& e : EntriesOf(*gpu_, "cudnn_gelu_plan")) entries.push_back(e);
  for (const RouteEntry& entry : entries) {
    // Up to three candidates of each shape that ran in its trial, each pinned twice: the same
    // pin gives the same bits.
    int pinned = 0;
    for (size_t c = 0; c < entry.candidates.size() && pinned < 3; ++c) {
      if (entry.candidates[c].ms < 0 && static_cast<int>(c) != entry.chosen) continue;
      ++pinned;
      const std::string& name = entry.candidates[c].name;
      SCOPED_TRACE(entry.op + " pinned to " + name + " (" + entry.shape + "), " + Trace());
      // The forward pinned to the library whose algorithm or plan is pinned.
      const std::vector<RouteEntry> forward = EntriesOf(*gpu_, "gelu_gemm_forward");
      ASSERT_EQ(forward.size(), 1u);
      const std::vector<std::tuple<std::string, std::string, std::string>> routes = {
          {entry.op, entry.shape, name},
          {forward[0].op, forward[0].shape, entry.op == "cudnn_gelu_plan" ? "cudnn" : "cublaslt"}};
      MlpResult first;
      for (int run = 0; run < 2; ++run) {
        std::unique_ptr<CudaBackend> gpu = Pinned(Pins(routes));
        const MlpResult r = RunMlp(gpu.get(), 2, 0);
        ASSERT_STATUS_OK(r.status);
        EXPECT_RELATIVE_ERROR_BELOW(r.out, want_.out, 1e-2);
        const RouteEntry* taken = gpu->routes()->Find(entry.op, entry.shape);
        if (entry.op == "cublaslt_gemm" && taken == nullptr) continue;  // not this path's GEMM
        ASSERT_NE(taken, nullptr);
        EXPECT_EQ(taken->how, "pinned");
        EXPECT_EQ(taken->chosen_name(), name);
        if (run == 0)
          first = r;
        else
          EXPECT_BITWISE_EQUAL(r.out, first.out);
      }
    }
  }
}

TEST_F(CudaRoutesTest, AttentionRoutesCanBePinned) {
  const int B = 2, T = 64, NH = 4, HC = 4 * 64;
  const std::vector<float> qkv = Random(B * T * 3 * HC);
  std::string shape;
  std::vector<float> outs[2];
  for (const char* name : {"ours", "cudnn"}) {
    if (std::string(name) == "cudnn" && !CudaBackend::CudnnAttentionCompiled()) continue;
    if (shape.empty()) {  // the shape's name, from an unpinned backend's table
      std::unique_ptr<CudaBackend> plain;
      ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kBF16, &plain));
      DeviceBuffer q(plain.get(), DType::kBF16, {B, T, 3 * HC}),
          o(plain.get(), DType::kBF16, {B, T, HC}), s(plain.get(), DType::kF32, {B, NH, T});
      ASSERT_STATUS_OK(q.Upload(qkv));
      ASSERT_STATUS_OK(plain->AttentionForward(o.tensor(), s.tensor(), q.tensor(), NH));
      ASSERT_EQ(EntriesOf(*plain, "attention").size(), 1u);
      shape = EntriesOf(*plain, "attention")[0].shape;
    }
    std::unique_ptr<CudaBackend> gpu;
    ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kBF16, &gpu));
    SCOPED_TRACE(std::string("attention pinned to ") + name);
    ASSERT_STATUS_OK(gpu->PinRoutes(Pins({{"attention", shape, name}})));
    DeviceBuffer q(gpu.get(), DType::kBF16, {B, T, 3 * HC}), o(gpu.get(), DType::kBF16, {B, T, HC}),
        s(gpu.get(), DType::kF32, {B, NH, T});
    ASSERT_STATUS_OK(q.Upload(qkv));
    ASSERT_STATUS_OK(gpu->AttentionForward(o.tensor(), s.tensor(), q.tensor(), NH));
    const bool ours = std::string(name) == "ours";
    EXPECT_EQ(gpu->path_counts().attention_fallback, ours ? 1 : 0);
    EXPECT_EQ(gpu->path_counts().attention_cudnn, ours ? 0 : 1);
    outs[ours ? 0 : 1] = o.Download();
  }
  if (!outs[1].empty()) {
    EXPECT_RELATIVE_ERROR_BELOW(outs[1], outs[0], 2e-2);
  }
}

// Another rank's choice by rule (attention: cuDNN wherever it runs the shape) is not adopted: a
// rule's choice follows what this rank's libraries run, and only timed choices are unified.
TEST_F(CudaRoutesTest, RuleChoicesAreNotAdopted) {
  if (!CudaBackend::CudnnAttentionCompiled()) GTEST_SKIP() << "built without cuDNN's frontend";
  const int B = 2, T = 64, NH = 4, HC = 4 * 64;
  DeviceBuffer q(gpu_.get(), DType::kBF16, {B, T, 3 * HC}),
      o(gpu_.get(), DType::kBF16, {B, T, HC}), s(gpu_.get(), DType::kF32, {B, NH, T});
  ASSERT_STATUS_OK(q.Upload(Random(B * T * 3 * HC)));
  ASSERT_STATUS_OK(gpu_->AttentionForward(o.tensor(), s.tensor(), q.tensor(), NH));
  const std::vector<RouteEntry> mine = EntriesOf(*gpu_, "attention");
  ASSERT_EQ(mine.size(), 1u);
  ASSERT_EQ(mine[0].chosen_name(), "cudnn");
  RouteTable table;
  table.Record({"attention", mine[0].shape, {{"cudnn", -1.f}, {"ours", -1.f}}, 1, "rule"});
  ASSERT_STATUS_OK(gpu_->AdoptRoutes(table));
  const int before = gpu_->path_counts().attention_cudnn;
  ASSERT_STATUS_OK(gpu_->AttentionForward(o.tensor(), s.tensor(), q.tensor(), NH));
  EXPECT_EQ(gpu_->path_counts().attention_cudnn, before + 1);
  EXPECT_EQ(gpu_->path_counts().attention_fallback, 0);
}

// The one line of a refused pin.
void ExpectRefusal(const Status& s, const std::string& op, const std::string& candidate) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ExitCode::kUsage);
  EXPECT_NE(s.message().find(kPinsFile), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(op), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(candidate), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

TEST_F(CudaRoutesTest, PinsThatDoNotApplyAreRefused) {
  ExpectRefusal(gpu_->PinRoutes(Pins({{"no_such_op", "N=1", "x"}})), "no_such_op", "");
  ExpectRefusal(gpu_->PinRoutes(Pins({{"gelu_gemm_forward", "N=256 C=256 F=512 bias", "sm91"}})),
                "gelu_gemm_forward", "sm91");
  ExpectRefusal(gpu_->PinRoutes(Pins({{"cublaslt_gemm", "s", "fastest"}})), "cublaslt_gemm",
                "fastest");
  // Our sm90 kernel takes N in multiples of 128 only: a pin to it for N = 100 is refused on the
  // shape's first call, on any GPU.
  std::unique_ptr<CudaBackend> gpu =
      Pinned(Pins({{"gelu_gemm_forward", "N=100 C=256 F=512 bias", "sm90"}}));
  const int n = 100;
  DeviceBuffer in(gpu.get(), DType::kBF16, {n, C}), w(gpu.get(), DType::kBF16, {OC, C}),
      b(gpu.get(), DType::kBF16, {OC}), out(gpu.get(), DType::kBF16, {n, OC}),
      pre(gpu.get(), DType::kBF16, {n, OC});
  ExpectRefusal(gpu->MatmulForward(out.tensor(), pre.tensor(), in.tensor(), w.tensor(), b.tensor(),
                                   Activation::kGelu),
                "gelu_gemm_forward", "sm90");
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
