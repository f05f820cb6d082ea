// GPU tests of the CUDA backend's grouped matrix products (the MoE experts' GEMMs,
// Backend::GroupedMatmulForward/Backward) against their CPU twin (the per-group loop of the CPU
// fp32 backend) on the same bf16-rounded inputs: uneven groups, empty experts, every row on one
// expert, experts in two runs (the weight gradient in waves), the weight gradient accumulated and
// overwritten, rows in no group left as they were, odd sizes, and an OLMoE-sized case (64
// experts, C = R = 2048, ~16k rows in uneven groups) and a Mixtral-sized one (2 experts of ~8k
// rows). Where our sm90 kernels run the shape (an sm_90 GPU, both matrix sides multiples of 256)
// they must have run the forward, the input gradient and the weight gradient in one launch each,
// whatever the groups' sizes; elsewhere, where the leading dimensions are multiples of 8 and the
// mean group is small (its GEMM under 25 us at 700 TFLOP/s), the cuBLAS grouped path the forward
// and the input gradient (path_counts(), no fallback), else the per-group loop; there the bf16
// weight gradients (f32 output) always take the loop. The OLMoE-sized case prints the grouped
// GEMM's TFLOP/s against one dense cuBLASLt GEMM of the same total size.
#include <iterator>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "grouped_matmul_cases.h"
#include "grouped_sm90_runs.h"

namespace trainer {
namespace cuda_testing {
namespace {

using grouped_testing::GroupedCase;

// The odd cases (grouped_matmul_cases.h), then these: leading dimensions multiples of 8.
constexpr GroupedCase kAlignedCases[] = {
    {"uneven aligned", 301, 72, 40, 8, "uneven"},
    {"two runs aligned", 203, 64, 96, 6, "two runs"},
    {"one expert aligned", 131, 128, 64, 5, "one expert"},
    {"mixtral-sized", 16384 + grouped_testing::kSpareRows, 2048, 2048, 2, "uneven"},
    {"olmoe-sized", 16384 + grouped_testing::kSpareRows, 2048, 2048, 64, "uneven"},
};

// Whether the backend should take cuBLAS's grouped GEMM for these groups: the mean non-empty
// group's GEMM (2 rows C OC FLOPs) under 25 us at 700 TFLOP/s.
bool SmallGroups(const std::vector<ExpertRun>& groups, int64_t C, int64_t OC) {
  double rows = 0, count = 0;
  for (const ExpertRun& g : groups)
    if (g.rows > 0) rows += static_cast<double>(g.rows), count += 1;
  return count > 0 && 2.0 * rows / count * C * OC <= 25e-6 * 700e12;
}

class CudaGroupedMatmulTest : public CudaVsCpuTest {
 protected:
  // The path counters' sums, to see which path a call took: one grouped launch, cuBLAS's or (where
  // they run the shape, by the rule) our sm90 kernels'.
  int Grouped() const { return gpu_->path_counts().grouped_gemm + Sm90(); }
  int Sm90() const { return gpu_->path_counts().grouped_sm90; }
  int Fallbacks() const { return gpu_->path_counts().grouped_gemm_fallback; }
};

TEST_F(CudaGroupedMatmulTest, MatchesCpuTwinOnTheGroupedPath) {
  std::vector<GroupedCase> cases(std::begin(grouped_testing::kOddCases),
                                 std::end(grouped_testing::kOddCases));
  cases.insert(cases.end(), std::begin(kAlignedCases), std::end(kAlignedCases));
  for (const GroupedCase& c : cases) {
    SCOPED_TRACE(std::string(c.name) + ", " + Trace());
    const int64_t M = c.rows, C = c.C, OC = c.OC, E = c.E;
    const bool aligned = C % 8 == 0 && OC % 8 == 0;
    const std::vector<ExpertRun> groups = grouped_testing::MakeGroups(c, rng_);
    // The rule's route: our kernels where they run the shape, else cuBLAS's grouped GEMM for
    // small groups (forward and input gradient), else the per-group loop.
    const bool sm90 = GroupedSm90KernelRuns(OC, C);
    const bool grouped = aligned && (sm90 || SmallGroups(groups, C, OC));
    std::vector<float> in = Random(M * C), w = Random(E * OC * C), out0 = Random(M * OC),
                       dout = Random(M * OC), din0 = Random(M * C),
                       dw0 = RandomFloats(E * OC * C, rng_);
    auto g_in = Compute(in, {M, C}), g_w = Compute(w, {E, OC, C}), g_dout = Compute(dout, {M, OC});

    // Forward.
    std::vector<float> out = out0;
    ASSERT_STATUS_OK(cpu_->GroupedMatmulForward(HostView(out, {M, OC}), HostView(in, {M, C}),
                                                HostView(w, {E, OC, C}), groups));
    auto g_out = Compute(out0, {M, OC});
    const int grouped0 = Grouped(), fallbacks0 = Fallbacks(), sm90_0 = Sm90();
    ASSERT_STATUS_OK(
        gpu_->GroupedMatmulForward(g_out->tensor(), g_in->tensor(), g_w->tensor(), groups));
    const std::vector<float> got = g_out->Download();
    EXPECT_RELATIVE_ERROR_BELOW(got, out, 1e-2);
    for (int64_t i = (M - grouped_testing::kSpareRows) * OC; i < M * OC; ++i)
      ASSERT_EQ(got[i], out0[i]) << "a row in no group changed, at " << i;
    if (aligned) {
      EXPECT_EQ(Grouped() - grouped0, grouped ? 1 : 0) << "the forward in one grouped launch";
      EXPECT_EQ(Sm90() - sm90_0, sm90 ? 1 : 0) << "the forward on our sm90 kernels";
      EXPECT_EQ(Fallbacks(), fallbacks0) << "the forward fell back to the per-group loop";
    }

    // Backward, accumulating and overwriting the weight gradient.
    for (bool accumulate : {true, false}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      const GradientWrite write =
          accumulate ? GradientWrite::kAccumulate : GradientWrite::kOverwrite;
      std::vector<float> din = din0, dw = dw0;
      ASSERT_STATUS_OK(cpu_->GroupedMatmulBackward(HostView(din, {M, C}), HostView(dw, {E, OC, C}),
                                                   HostView(dout, {M, OC}), HostView(in, {M, C}),
                                                   HostView(w, {E, OC, C}), groups, write));
      auto g_din = Compute(din0, {M, C}), g_dw = F32(dw0, {E, OC, C});
      const int grouped1 = Grouped(), fallbacks1 = Fallbacks();
      ASSERT_STATUS_OK(gpu_->GroupedMatmulBackward(g_din->tensor(), g_dw->tensor(),
                                                   g_dout->tensor(), g_in->tensor(), g_w->tensor(),
                                                   groups, write));
      EXPECT_RELATIVE_ERROR_BELOW(g_din->Download(), din, 1e-2);
      // What the op added (or wrote), so that dw0 does not hide its errors.
      EXPECT_RELATIVE_ERROR_BELOW(Minus(g_dw->Download(), dw0), Minus(dw, dw0), 1e-2);
      if (aligned) {
        EXPECT_EQ(Grouped() - grouped1, (grouped ? 1 : 0) + (sm90 ? 1 : 0))
            << "din in one grouped launch (sm90, or small groups), dweights by the per-group "
               "loop or, on sm90, in one launch";
        EXPECT_EQ(Fallbacks(), fallbacks1) << "the backward fell back to the per-group loop";
      }
    }
  }
}

// The grouped GEMM's speed on the OLMoE-sized forward against one dense cuBLASLt GEMM of the
// same total rows (printed, not asserted: the figure for the MoE speed notes).
TEST_F(CudaGroupedMatmulTest, PrintsGroupedAgainstDenseSpeed) {
  const GroupedCase c = *(std::end(kAlignedCases) - 1);  // the OLMoE-sized case
  const int64_t M = c.rows, C = c.C, OC = c.OC, E = c.E;
  const std::vector<ExpertRun> groups = grouped_testing::MakeGroups(c, rng_);
  auto g_in = Compute(Random(M * C), {M, C}), g_w = Compute(Random(E * OC * C), {E, OC, C});
  auto g_out = Compute(std::vector<float>(M * OC), {M, OC});
  const Tensor w0(g_w->tensor().data, gpu_->compute_dtype(), {OC, C});
  const int repeats = 10;
  double seconds[2] = {0, 0};
  for (int dense = 0; dense < 2; ++dense) {
    for (int i = 0; i <= repeats; ++i) {
      if (i == 1) ASSERT_STATUS_OK(gpu_->Mark(0));  // the first call warms up
      ASSERT_STATUS_OK(dense ? gpu_->MatmulForward(g_out->tensor(), Tensor(), g_in->tensor(), w0,
                                                   Tensor(), Activation::kNone)
                             : gpu_->GroupedMatmulForward(g_out->tensor(), g_in->tensor(),
                                                          g_w->tensor(), groups));
    }
    ASSERT_STATUS_OK(gpu_->Mark(1));
    ASSERT_STATUS_OK(gpu_->SecondsBetween(0, 1, &seconds[dense]));
  }
  const double flops = 2.0 * (M - grouped_testing::kSpareRows) * C * OC * repeats;
  std::printf("grouped GEMM, %zu groups of 16384 rows, C=%lld, OC=%lld: %.1f TFLOP/s; dense "
              "cuBLASLt GEMM of the same size: %.1f TFLOP/s\n",
              groups.size(), (long long)C, (long long)OC, flops / seconds[0] * 1e-12,
              flops * M / (M - grouped_testing::kSpareRows) / seconds[1] * 1e-12);
  EXPECT_GT(seconds[0], 0.0);
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
