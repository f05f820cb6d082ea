// GPU tests of our sm90 grouped GEMMs (src/model/cuda/sm90/grouped_gemm_sm90.cu) through the CUDA
// backend's grouped_gemm route, forced (set_grouped_gemm_route) or pinned (Engine.gpu_routes),
// against the CPU twin (the CPU backend's per-group loop) on the same bf16-rounded inputs: the
// forward (alone, and with SwiGLU in its epilogue: its h equal to the forward's to the bit, its act
// to SwiGluForward's), the input gradient (alone, and with SwiGLU's backward: its dh equal to
// SwiGluBackward's of the input gradient to the bit) and the weight gradient (overwritten and
// accumulated, with the sum of its squares; experts without rows untouched to the bit) on groups of
// 1, 127, 128, 129 and 300 rows, with rows in no group between the groups (NaN in the inputs, their
// outputs kept to the bit), empty experts, every row on one expert, one group, an expert in two
// runs, 64 experts of random sizes, and OLMoE's and Mixtral's expert shapes (C 2048; OC 1024, 2048,
// 7168, 14336; the down projection C 1024, OC 2048; the weight gradient on those with up to 64M
// weights). Each call must have run our kernel once (path_counts().grouped_sm90) and cuBLAS's
// grouped GEMM never. A pin runs our kernel and is recorded; pins and a TRAINER_GROUPED_GEMM value
// that do not apply are refused in one line. A benchmark prints the TFLOP/s of our kernel, cuBLAS's
// grouped GEMM, the per-group loop and one dense cuBLASLt GEMM of the same rows (not asserted). The
// kernel's cases skip on GPUs other than sm_90.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "cuda_test_util.h"
#include "grouped_matmul_cases.h"
#include "grouped_sm90_runs.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/sm90/grouped_gemm_sm90.h"

namespace trainer {
namespace cuda_testing {
namespace {

// Groups in row order, (expert, rows) each, `gap` rows in no group after each and
// grouped_testing::kSpareRows at the end; random_experts > 0: that many experts of 0-max_rows
// rows each instead.
struct Sm90Case {
  const char* name;
  int64_t C, OC;
  int E;
  std::vector<std::pair<int, int64_t>> runs;
  int64_t gap = 0;
  int64_t max_rows = 0;  // with runs empty: each expert 0..max_rows rows (0 for a quarter)
};

const std::vector<Sm90Case>& Cases() {
  static const std::vector<Sm90Case> cases = {
      {"odd sizes", 256, 512, 5, {{0, 1}, {1, 127}, {2, 128}, {3, 129}, {4, 300}}},
      {"odd sizes, rows between", 256, 512, 5, {{3, 129}, {0, 1}, {4, 300}, {1, 127}, {2, 128}}, 5},
      {"empty experts", 512, 256, 8, {{1, 200}, {2, 0}, {4, 77}, {6, 3}}, 2},
      {"one expert", 256, 256, 4, {{2, 700}}},
      {"one group", 256, 768, 1, {{0, 333}}},
      {"an expert in two runs", 512, 512, 3, {{0, 100}, {1, 50}, {0, 70}, {2, 129}, {1, 1}}},
      {"64 experts", 256, 256, 64, {}, 0, 150},
      {"olmoe gate+up", 2048, 2048, 64, {}, 0, 60},
      {"olmoe up", 2048, 1024, 64, {}, 0, 60},
      {"olmoe down", 1024, 2048, 64, {}, 0, 60},
      {"mixtral", 2048, 7168, 8, {}, 0, 90},
      {"mixtral gate+up", 2048, 14336, 8, {}, 0, 60},
      {"olmoe gate+up, 8 experts", 2048, 2048, 8, {}, 3, 300},
      {"mixtral gate+up, 2 experts", 2048, 14336, 2, {}, 0, 200},
  };
  return cases;
}

// The case's groups and the rows of the row-side tensors.
std::vector<ExpertRun> MakeSm90Groups(const Sm90Case& c, std::mt19937& rng, int64_t* rows) {
  std::vector<std::pair<int, int64_t>> runs = c.runs;
  if (runs.empty()) {
    std::uniform_int_distribution<int64_t> size(1, c.max_rows);
    for (int e = 0; e < c.E; ++e) runs.push_back({e, e % 4 == 3 ? 0 : size(rng)});
  }
  std::vector<ExpertRun> groups;
  int64_t offset = 0;
  for (const auto& [expert, n] : runs) {
    groups.push_back({expert, offset, n});
    offset += n + c.gap;
  }
  *rows = offset + grouped_testing::kSpareRows;
  return groups;
}

// Whether row r of the row-side tensors is in a group.
std::vector<bool> RowsInGroups(const std::vector<ExpertRun>& groups, int64_t rows) {
  std::vector<bool> in(rows, false);
  for (const ExpertRun& g : groups)
    for (int64_t r = g.offset; r < g.offset + g.rows; ++r) in[r] = true;
  return in;
}

class CudaGroupedSm90Test : public CudaVsCpuTest {
 protected:
  int Sm90() const { return gpu_->path_counts().grouped_sm90; }
  int Cublas() const { return gpu_->path_counts().grouped_gemm; }

  // got against want (the CPU twin's), and rows in no group of got equal to `before`'s.
  void ExpectRows(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& before, const std::vector<bool>& in_group,
                  int64_t cols) {
    EXPECT_RELATIVE_ERROR_BELOW(got, want, 1e-2);
    for (size_t r = 0; r < in_group.size(); ++r) {
      if (in_group[r]) continue;
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(got[r * cols + c], before[r * cols + c]) << "row " << r << " in no group changed";
    }
  }
};

// Rows in no group of the row-side inputs to NaN: our kernels may read them (a group's last block
// or k-block reaches past it) but must not let them into a result.
void PoisonRowsInNoGroup(const std::vector<bool>& in_group, int64_t cols, std::vector<float>* x) {
  for (size_t r = 0; r < in_group.size(); ++r)
    if (!in_group[r]) std::fill(x->begin() + r * cols, x->begin() + (r + 1) * cols, std::nanf(""));
}

TEST_F(CudaGroupedSm90Test, MatchesCpuTwin) {
  if (!GroupedSm90KernelRuns())
    GTEST_SKIP() << "not an sm_90 GPU (or a build without sm90 kernels)";
  gpu_->set_grouped_gemm_route(GroupedGemmRoute::kSm90);
  for (size_t i = 0; i < Cases().size(); ++i) {
    const Sm90Case& c = Cases()[i];
    // The weight gradient where its f32 copies stay small, overwritten and accumulated in turn.
    const bool with_dw = int64_t{c.E} * c.OC * c.C <= (int64_t{64} << 20);
    const GradientWrite write = i % 2 ? GradientWrite::kAccumulate : GradientWrite::kOverwrite;
    SCOPED_TRACE(std::string(c.name) + ", " + Trace() +
                 (with_dw ? (i % 2 ? ", dW accumulated" : ", dW overwritten") : ""));
    int64_t M = 0;
    const std::vector<ExpertRun> groups = MakeSm90Groups(c, rng_, &M);
    const std::vector<bool> in_group = RowsInGroups(groups, M);
    const int64_t C = c.C, OC = c.OC, E = c.E;
    std::vector<float> in = Random(M * C), w = Random(E * OC * C), out0 = Random(M * OC),
                       dout = Random(M * OC), din0 = Random(M * C);
    PoisonRowsInNoGroup(in_group, C, &in);
    PoisonRowsInNoGroup(in_group, OC, &dout);
    std::vector<float> dw0 = RandomFloats(with_dw ? E * OC * C : 0, rng_);
    // The CPU twin's results first; the squares of dW added to 0.5.
    std::vector<float> out = out0, din = din0, dw = dw0;
    double squares = 0.5;
    ASSERT_STATUS_OK(cpu_->GroupedMatmulForward(HostView(out, {M, OC}), HostView(in, {M, C}),
                                                HostView(w, {E, OC, C}), groups));
    ASSERT_STATUS_OK(cpu_->GroupedMatmulBackward(
        HostView(din, {M, C}), with_dw ? HostView(dw, {E, OC, C}) : Tensor(),
        HostView(dout, {M, OC}), HostView(in, {M, C}), HostView(w, {E, OC, C}), groups, write,
        with_dw ? Tensor(&squares, DType::kF64, {1}) : Tensor()));

    auto g_in = Compute(in, {M, C}), g_w = Compute(w, {E, OC, C}), g_dout = Compute(dout, {M, OC});
    auto g_out = Compute(out0, {M, OC}), g_din = Compute(din0, {M, C});
    auto g_dw = with_dw ? F32(dw0, {E, OC, C}) : nullptr;
    DeviceBuffer g_squares(gpu_.get(), DType::kF64, {1});
    const double half = 0.5;
    ASSERT_STATUS_OK(gpu_->CopyToDevice(g_squares.tensor().data, &half, sizeof(half)));
    const int sm90 = Sm90(), cublas = Cublas();
    ASSERT_STATUS_OK(
        gpu_->GroupedMatmulForward(g_out->tensor(), g_in->tensor(), g_w->tensor(), groups));
    const std::vector<float> h = g_out->Download();
    ExpectRows(h, out, out0, in_group, OC);
    EXPECT_EQ(Sm90() - sm90, 1) << "the forward in one launch of our kernel";
    {  // The forward with SwiGLU in its epilogue (OC = 2F): h equal to the forward's to the bit,
       // act to SwiGluForward's of it, and both near the CPU twin's.
      SCOPED_TRACE("forward + SwiGLU");
      const int64_t F = OC / 2;
      std::vector<float> act0 = Random(M * F), act = act0, h_cpu = out0;
      ASSERT_STATUS_OK(cpu_->GroupedMatmulSwiGluForward(HostView(h_cpu, {M, OC}),
                                                        HostView(act, {M, F}), HostView(in, {M, C}),
                                                        HostView(w, {E, OC, C}), groups));
      auto g_h = Compute(out0, {M, OC}), g_act = Compute(act0, {M, F});
      auto g_act_plain = Compute(act0, {M, F});
      const int before = Sm90();
      ASSERT_STATUS_OK(gpu_->GroupedMatmulSwiGluForward(g_h->tensor(), g_act->tensor(),
                                                        g_in->tensor(), g_w->tensor(), groups));
      EXPECT_EQ(Sm90() - before, 1) << "the forward + SwiGLU in one launch of our kernel";
      ASSERT_EQ(g_h->Download(), h) << "h differs from the forward's";
      for (const ExpertRun& g : groups)
        if (g.rows > 0)
          ASSERT_STATUS_OK(gpu_->SwiGluForward(MatrixRows(g_act_plain->tensor(), g.offset, g.rows),
                                               MatrixRows(g_out->tensor(), g.offset, g.rows)));
      const std::vector<float> got_act = g_act->Download();
      ASSERT_EQ(got_act, g_act_plain->Download()) << "act differs from SwiGluForward's";
      ExpectRows(got_act, act, act0, in_group, F);
      ExpectRows(g_h->Download(), h_cpu, out0, in_group, OC);
    }
    const int before_backward = Sm90(), squares_before = gpu_->path_counts().grouped_sm90_squares;
    ASSERT_STATUS_OK(gpu_->GroupedMatmulBackward(
        g_din->tensor(), with_dw ? g_dw->tensor() : Tensor(), g_dout->tensor(), g_in->tensor(),
        g_w->tensor(), groups, write, with_dw ? g_squares.tensor() : Tensor()));
    ExpectRows(g_din->Download(), din, din0, in_group, C);
    EXPECT_EQ(Sm90() - before_backward, with_dw ? 2 : 1)
        << "each gradient in one launch of our kernels";
    EXPECT_EQ(Cublas(), cublas) << "cuBLAS's grouped GEMM ran on the sm90 route";
    EXPECT_EQ(gpu_->path_counts().grouped_sm90_squares - squares_before,
              with_dw && write == GradientWrite::kOverwrite ? 1 : 0)
        << "an overwritten dW's squares summed by the kernel (else by a pass)";
    {  // The input gradient with SwiGLU's backward (C = F, h (M, 2C), act = in): dh equal to
       // SwiGluBackward's of the plain input gradient to the bit, and near the CPU twin's; dW
       // equal to the plain backward's to the bit.
      SCOPED_TRACE("input gradient + SwiGLU backward");
      std::vector<float> h = Random(M * 2 * C), dh0 = Random(M * 2 * C);
      PoisonRowsInNoGroup(in_group, 2 * C, &h);
      std::vector<float> dh = dh0, dact = din0, dw_cpu = dw0;
      ASSERT_STATUS_OK(cpu_->GroupedMatmulSwiGluBackward(
          HostView(dh, {M, 2 * C}), with_dw ? HostView(dw_cpu, {E, OC, C}) : Tensor(),
          HostView(dact, {M, C}), HostView(dout, {M, OC}), HostView(in, {M, C}),
          HostView(h, {M, 2 * C}), HostView(w, {E, OC, C}), groups, write));
      auto g_h = Compute(h, {M, 2 * C}), g_dh = Compute(dh0, {M, 2 * C}),
           g_dh_plain = Compute(dh0, {M, 2 * C}), g_dact = Compute(din0, {M, C});
      auto g_dw_fused = with_dw ? F32(dw0, {E, OC, C}) : nullptr;
      DeviceBuffer g_fused_squares(gpu_.get(), DType::kF64, {1});
      ASSERT_STATUS_OK(gpu_->CopyToDevice(g_fused_squares.tensor().data, &half, sizeof(half)));
      const int before = Sm90();
      ASSERT_STATUS_OK(gpu_->GroupedMatmulSwiGluBackward(
          g_dh->tensor(), with_dw ? g_dw_fused->tensor() : Tensor(), g_dact->tensor(),
          g_dout->tensor(), g_in->tensor(), g_h->tensor(), g_w->tensor(), groups, write,
          with_dw ? g_fused_squares.tensor() : Tensor()));
      EXPECT_EQ(Sm90() - before, with_dw ? 2 : 1) << "each gradient in one launch of our kernels";
      for (const ExpertRun& g : groups)
        if (g.rows > 0)
          ASSERT_STATUS_OK(gpu_->SwiGluBackward(MatrixRows(g_dh_plain->tensor(), g.offset, g.rows),
                                                MatrixRows(g_din->tensor(), g.offset, g.rows),
                                                MatrixRows(g_h->tensor(), g.offset, g.rows)));
      const std::vector<float> got_dh = g_dh->Download();
      ASSERT_EQ(got_dh, g_dh_plain->Download()) << "dh differs from SwiGluBackward's";
      ExpectRows(got_dh, dh, dh0, in_group, 2 * C);
      if (with_dw) {
        ASSERT_EQ(g_dw_fused->Download(), g_dw->Download()) << "dW differs";
        double plain = 0, fused = 0;
        ASSERT_STATUS_OK(gpu_->CopyToHost(&plain, g_squares.tensor().data, sizeof(double)));
        ASSERT_STATUS_OK(gpu_->CopyToHost(&fused, g_fused_squares.tensor().data, sizeof(double)));
        ASSERT_EQ(fused, plain) << "dW's squares differ";
      }
      // act made again (SwiGluAct::kRemake): act[R] equal to SwiGluForward's of h[R] to the bit
      // (other rows untouched), dh as above, dW (and its squares) those of the product with it.
      const std::vector<float> act0 = Random(M * C);
      auto g_act_made = Compute(act0, {M, C}), g_act_want = Compute(act0, {M, C});
      auto g_dh_made = Compute(dh0, {M, 2 * C}), g_dact_made = Compute(din0, {M, C});
      auto g_dw_made = with_dw ? F32(dw0, {E, OC, C}) : nullptr;
      auto g_dw_of_act = with_dw ? F32(dw0, {E, OC, C}) : nullptr;
      DeviceBuffer g_made_squares(gpu_.get(), DType::kF64, {1});
      DeviceBuffer g_act_squares(gpu_.get(), DType::kF64, {1});
      ASSERT_STATUS_OK(gpu_->CopyToDevice(g_made_squares.tensor().data, &half, sizeof(half)));
      ASSERT_STATUS_OK(gpu_->CopyToDevice(g_act_squares.tensor().data, &half, sizeof(half)));
      const int before_made = Sm90();
      ASSERT_STATUS_OK(gpu_->GroupedMatmulSwiGluBackward(
          g_dh_made->tensor(), with_dw ? g_dw_made->tensor() : Tensor(), g_dact_made->tensor(),
          g_dout->tensor(), g_act_made->tensor(), g_h->tensor(), g_w->tensor(), groups, write,
          with_dw ? g_made_squares.tensor() : Tensor(), SwiGluAct::kRemake));
      EXPECT_EQ(Sm90() - before_made, with_dw ? 2 : 1) << "each gradient in one launch";
      for (const ExpertRun& g : groups)
        if (g.rows > 0)
          ASSERT_STATUS_OK(gpu_->SwiGluForward(MatrixRows(g_act_want->tensor(), g.offset, g.rows),
                                               MatrixRows(g_h->tensor(), g.offset, g.rows)));
      ASSERT_EQ(g_act_made->Download(), g_act_want->Download()) << "act made again differs";
      ASSERT_EQ(g_dh_made->Download(), got_dh) << "dh differs with act made again";
      if (with_dw) {
        ASSERT_STATUS_OK(gpu_->GroupedMatmulBackward(
            Tensor(), g_dw_of_act->tensor(), g_dout->tensor(), g_act_want->tensor(), g_w->tensor(),
            groups, write, g_act_squares.tensor()));
        ASSERT_EQ(g_dw_made->Download(), g_dw_of_act->Download()) << "dW of the act made again";
        double made = 0, of_act = 0;
        ASSERT_STATUS_OK(gpu_->CopyToHost(&made, g_made_squares.tensor().data, sizeof(double)));
        ASSERT_STATUS_OK(gpu_->CopyToHost(&of_act, g_act_squares.tensor().data, sizeof(double)));
        ASSERT_EQ(made, of_act) << "dW's squares differ with act made again";
      }
    }
    if (!with_dw) continue;
    const std::vector<float> got = g_dw->Download();
    // What the op added (or wrote), so that dw0 does not hide its errors; experts in no group
    // keep dw0 to the bit when accumulating, and are zero when overwritten.
    EXPECT_RELATIVE_ERROR_BELOW(Minus(got, dw0), Minus(dw, dw0), 1e-2);
    std::vector<bool> has_rows(E, false);
    for (const ExpertRun& g : groups) has_rows[g.expert] = has_rows[g.expert] || g.rows > 0;
    const bool overwrite = write == GradientWrite::kOverwrite;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t j = e * OC * C; j < (e + 1) * OC * C && !has_rows[e]; ++j)
        ASSERT_EQ(got[j], overwrite ? 0.f : dw0[j]) << "expert " << e << " has no rows";
    // The squares of dW it added (overwritten: summed by the kernel as it stored dW): near the
    // CPU twin's, and near a pass over the dW it wrote.
    double got_squares = 0, pass = 0;
    ASSERT_STATUS_OK(gpu_->CopyToHost(&got_squares, g_squares.tensor().data, sizeof(double)));
    ASSERT_STATUS_OK(gpu_->SumInto(g_squares.tensor(), g_dw->tensor(), SumOf::kSquares, false));
    ASSERT_STATUS_OK(gpu_->CopyToHost(&pass, g_squares.tensor().data, sizeof(double)));
    EXPECT_NEAR(got_squares - 0.5, squares - 0.5, 1e-2 * (squares - 0.5)) << "dW's squares";
    EXPECT_NEAR(got_squares - 0.5, pass, 1e-5 * pass) << "dW's squares against a pass over dW";
  }
}

// Pins (Engine.gpu_routes' file) of op grouped_gemm, parsed as a routes file would be.
RouteTable GroupedPins(const std::vector<std::pair<std::string, std::string>>& shape_candidates) {
  RouteTable table;
  for (const auto& [shape, candidate] : shape_candidates)
    table.Record({CudaBackend::kGroupedRouteOp, shape, {{candidate, -1.f}}, 0, "pinned"});
  RouteTable parsed;
  EXPECT_TRUE(RouteTable::Parse(table.ToJson(), "pins.json", &parsed).ok());
  return parsed;
}

void ExpectOneLineUsageError(const Status& s, const std::vector<std::string>& words) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ExitCode::kUsage);
  for (const std::string& word : words)
    EXPECT_NE(s.message().find(word), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

TEST_F(CudaGroupedSm90Test, PinsTakeTheRouteAndRefuseWhatDoesNotApply) {
  constexpr int64_t M = 300, C = 256, OC = 256, E = 4;
  const std::vector<ExpertRun> groups = {{1, 0, 130}, {3, 130, 167}};  // 3 rows in no group
  std::vector<float> in = Random(M * C), w = Random(E * OC * C), out0 = Random(M * OC);
  auto g_in = Compute(in, {M, C}), g_w = Compute(w, {E, OC, C}), g_out = Compute(out0, {M, OC});

  // A candidate the op does not have, at once; our kernels for C = 192 (not a multiple of 256),
  // on the shape's first call, on any GPU.
  ExpectOneLineUsageError(
      gpu_->PinRoutes(GroupedPins({{"forward E=4 OC=256 C=256 bf16", "cutlass"}})),
      {"pins.json", "grouped_gemm", "cutlass"});
  ASSERT_STATUS_OK(
      gpu_->PinRoutes(GroupedPins({{"weight_gradient E=4 OC=256 C=192 bf16", "sm90"}})));
  constexpr int64_t kOddC = 192;
  auto g_in_odd = Compute(Random(M * kOddC), {M, kOddC});
  auto g_w_odd = Compute(Random(E * OC * kOddC), {E, OC, kOddC});
  auto g_dw_odd = F32(std::vector<float>(E * OC * kOddC), {E, OC, kOddC});
  ExpectOneLineUsageError(
      gpu_->GroupedMatmulBackward(Tensor(), g_dw_odd->tensor(), g_out->tensor(), g_in_odd->tensor(),
                                  g_w_odd->tensor(), groups, GradientWrite::kOverwrite),
      {"pins.json", "grouped_gemm", "weight_gradient", "C=192", "sm90", "cannot run"});

  // A value of TRAINER_GROUPED_GEMM that is not a route, on a fresh backend's first grouped call.
  {
    std::unique_ptr<CudaBackend> gpu;
    ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kBF16, &gpu));
    setenv("TRAINER_GROUPED_GEMM", "fastest", 1);
    const Status s =
        gpu->GroupedMatmulForward(g_out->tensor(), g_in->tensor(), g_w->tensor(), groups);
    unsetenv("TRAINER_GROUPED_GEMM");
    ExpectOneLineUsageError(s, {"TRAINER_GROUPED_GEMM=fastest", "sm90"});
  }

  if (!GroupedSm90KernelRuns())
    GTEST_SKIP() << "not an sm_90 GPU (or a build without sm90 kernels)";
  const std::string shape = "forward E=4 OC=256 C=256 bf16";
  std::unique_ptr<CudaBackend> gpu;
  ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kBF16, &gpu));
  ASSERT_STATUS_OK(gpu->PinRoutes(GroupedPins({{shape, "sm90"}})));
  ASSERT_STATUS_OK(
      gpu->GroupedMatmulForward(g_out->tensor(), g_in->tensor(), g_w->tensor(), groups));
  EXPECT_EQ(gpu->path_counts().grouped_sm90, 1);
  EXPECT_EQ(gpu->path_counts().grouped_gemm, 0);
  const RouteEntry* entry = gpu->routes()->Find(CudaBackend::kGroupedRouteOp, shape);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->chosen_name(), "sm90");
  EXPECT_EQ(entry->how, "pinned");
  std::vector<float> out = out0;
  ASSERT_STATUS_OK(cpu_->GroupedMatmulForward(HostView(out, {M, OC}), HostView(in, {M, C}),
                                              HostView(w, {E, OC, C}), groups));
  ExpectRows(g_out->Download(), out, out0, RowsInGroups(groups, M), OC);
}

// Our kernels' speed against cuBLAS's grouped GEMM, the per-group loop and one dense cuBLASLt
// GEMM of the same rows, on OLMoE-sized groups (64 experts, ~16k rows in uneven groups, C = OC =
// 2048) and on 48 groups of 341 rows: the forward, the input gradient, the weight gradient (for
// which the cuBLAS route is the per-group loop in bf16) and the input gradient with SwiGLU's
// backward (a SwiGluBackward after it). Printed, not asserted.
TEST_F(CudaGroupedSm90Test, PrintsSpeedAgainstCublasAndDense) {
  if (!GroupedSm90KernelRuns())
    GTEST_SKIP() << "not an sm_90 GPU (or a build without sm90 kernels)";
  const grouped_testing::GroupedCase olmoe = {
      "olmoe-sized", 16384 + grouped_testing::kSpareRows, 2048, 2048, 64, "uneven"};
  std::vector<std::vector<ExpertRun>> splits = {grouped_testing::MakeGroups(olmoe, rng_), {}};
  for (int e = 0; e < 48; ++e) splits[1].push_back({e, e * 341, 341});  // 16368 rows
  const int64_t M = olmoe.rows, C = olmoe.C, OC = olmoe.OC, E = olmoe.E;
  auto g_in = Compute(Random(M * C), {M, C}), g_w = Compute(Random(E * OC * C), {E, OC, C});
  auto g_out = Compute(std::vector<float>(M * OC), {M, OC});
  auto g_dout = Compute(Random(M * OC), {M, OC}),
       g_din = Compute(std::vector<float>(M * C), {M, C});
  auto g_dw = F32(std::vector<float>(E * OC * C), {E, OC, C});
  auto g_h = Compute(Random(M * 2 * C), {M, 2 * C}),
       g_dh = Compute(std::vector<float>(M * 2 * C), {M, 2 * C});
  const Tensor w0(g_w->tensor().data, gpu_->compute_dtype(), {OC, C});
  const Tensor dw0(g_dw->tensor().data, DType::kF32, {OC, C});
  const int repeats = 10;
  const char* names[] = {"sm90", "cuBLAS grouped", "per-group cuBLASLt", "dense cuBLASLt"};
  const char* kinds[] = {"forward", "input gradient", "weight gradient",
                         "input gradient + SwiGLU backward"};
  const GroupedGemmRoute routes[] = {GroupedGemmRoute::kSm90, GroupedGemmRoute::kCublas,
                                     GroupedGemmRoute::kPerExpert};
  for (const std::vector<ExpertRun>& groups : splits) {
    int64_t rows = 0;
    for (const ExpertRun& g : groups) rows += g.rows;
    const Tensor in = MatrixRows(g_in->tensor(), 0, rows),
                 dout = MatrixRows(g_dout->tensor(), 0, rows);
    for (int kind = 0; kind < 4; ++kind) {
      // One call of the kind by route (3: one dense GEMM of the groups' rows with expert 0).
      auto call = [&](int route) -> Status {
        const bool dense = route == 3;
        if (kind == 3 && dense) {  // the dense input gradient, then SwiGLU's backward
          TRAINER_RETURN_IF_ERROR(gpu_->MatmulBackward(MatrixRows(g_din->tensor(), 0, rows),
                                                       Tensor(), Tensor(), dout, in, w0,
                                                       GradientWrite::kOverwrite));
          return gpu_->SwiGluBackward(MatrixRows(g_dh->tensor(), 0, rows),
                                      MatrixRows(g_din->tensor(), 0, rows),
                                      MatrixRows(g_h->tensor(), 0, rows));
        }
        if (kind == 3)  // act = in (C = F)
          return gpu_->GroupedMatmulSwiGluBackward(
              g_dh->tensor(), Tensor(), g_din->tensor(), g_dout->tensor(), g_in->tensor(),
              g_h->tensor(), g_w->tensor(), groups, GradientWrite::kOverwrite);
        if (kind == 0)
          return dense ? gpu_->MatmulForward(MatrixRows(g_out->tensor(), 0, rows), Tensor(), in, w0,
                                             Tensor(), Activation::kNone)
                       : gpu_->GroupedMatmulForward(g_out->tensor(), g_in->tensor(), g_w->tensor(),
                                                    groups);
        const Tensor din = kind == 1 ? g_din->tensor() : Tensor();
        const Tensor dw = kind == 2 ? g_dw->tensor() : Tensor();
        if (dense)
          return gpu_->MatmulBackward(din.empty() ? din : MatrixRows(din, 0, rows),
                                      dw.empty() ? dw : dw0, Tensor(), dout, in, w0,
                                      GradientWrite::kOverwrite);
        return gpu_->GroupedMatmulBackward(din, dw, g_dout->tensor(), g_in->tensor(), g_w->tensor(),
                                           groups, GradientWrite::kOverwrite);
      };
      std::string line =
          StrFormat("grouped %s, %zu groups of %lld rows, C=%lld, OC=%lld:", kinds[kind],
                    groups.size(), (long long)rows, (long long)C, (long long)OC);
      for (int route = 0; route < 4; ++route) {
        if (route < 3) gpu_->set_grouped_gemm_route(routes[route]);
        double seconds = 0;
        for (int i = 0; i <= repeats; ++i) {
          if (i == 1) ASSERT_STATUS_OK(gpu_->Mark(0));  // the first call warms up
          ASSERT_STATUS_OK(call(route));
        }
        ASSERT_STATUS_OK(gpu_->Mark(1));
        ASSERT_STATUS_OK(gpu_->SecondsBetween(0, 1, &seconds));
        line += StrFormat(" %s %.1f TFLOP/s%s", names[route],
                          2.0 * rows * C * OC * repeats / seconds * 1e-12, route < 3 ? "," : "");
      }
      std::printf("%s\n", line.c_str());
    }
  }
  gpu_->set_grouped_gemm_route(GroupedGemmRoute::kRule);
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
