// GPU tests of the Hopper GEMMs (src/model/cuda/sm90/) against their CPU twins on fresh random
// bf16 inputs. The GELU-gradient GEMM (its weight N-major, as stored) against cpu::matmul_forward
// on the weight's transpose, then cpu::gelu_backward (pre in [-3, 3], every 17th value in
// [-15, 15], past the slope's clamp at 10): one tile and one k-block, fewer k-blocks than pipeline
// stages, several tiles per CTA (the pre buffer handed back between tiles, the stage ring
// wrapping), din written in place of pre. The GELU forward GEMM against cpu::matmul_forward with
// its bias and GELU: from one tile to several per CTA (the bias slots alternating, the output tile
// handed back). Both also on 9 block rows, a full band of the tile order and one of a single row;
// with and without din's column sums per 128-row block (against the CPU's f32 din, and against the
// GPU's own din as stored), summed by the spare warps or in the multipliers' epilogue; alone and
// in clusters of two CTAs sharing the weight's k-blocks (the same results to the bit), a partial
// band of tile pairs included; the outputs filled with NaN before each launch, so that a tile left
// unwritten fails. Skipped on GPUs other than sm_90.
#include <array>
#include <string>

#include "cuda_test_util.h"
#include "model/cpu/cpu_kernels.h"

#if defined(TRAINER_WITH_SM90_KERNELS)
#include "model/cuda/sm90/gemm_dgelu.h"
#include "model/cuda/sm90/gemm_gelu_forward.h"
#endif

namespace trainer {
namespace cuda_testing {
namespace {

// The kernels run on the backend's stream, where the buffers were uploaded: a copy of up to 4 MiB
// is asynchronous there (CudaBackend::CopyToDevice), and the stream is non-blocking, so a launch
// on the legacy default stream could read its inputs before they land.
class CudaSm90GemmTest : public CudaVsCpuTest {
 protected:
  // Every byte of a device buffer to 0xff: NaN in bf16 and in f32, so that an output element the
  // kernel did not write fails the comparisons below instead of keeping an earlier run's value.
  void FillWithNan(void* device, int64_t bytes) {
    ASSERT_EQ(cudaMemsetAsync(device, 0xff, static_cast<size_t>(bytes), gpu_->stream()),
              cudaSuccess);
  }
};

#if defined(TRAINER_WITH_SM90_KERNELS)
// Column sums of an (m, n) row-major matrix per block of 128 rows: (m / 128, n), summed in f64.
std::vector<float> BlockColumnSums(const std::vector<float>& x, int64_t m, int64_t n) {
  std::vector<double> sums(m / 128 * n, 0.0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) sums[r / 128 * n + j] += x[r * n + j];
  return std::vector<float>(sums.begin(), sums.end());
}

TEST_F(CudaSm90GemmTest, DgeluMatchesCpuMatmulThenGeluBackward) {
  struct Case {
    int64_t m, n, k;
    bool in_place, with_sums;
  };
  const Case cases[] = {{128, 256, 64, false, true},     {384, 512, 128, false, false},
                        {1024, 768, 320, true, true},    {4096, 2048, 256, false, true},
                        {1152, 512, 128, false, true},   {1280, 512, 128, false, true},
                        {8192, 1024, 1024, true, false}, {8192, 1024, 1024, true, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(Trace() + ", M " + std::to_string(c.m) + ", N " + std::to_string(c.n) + ", K " +
                 std::to_string(c.k) + (c.in_place ? ", in place" : "") +
                 (c.with_sums ? ", column sums" : ""));
    const std::vector<float> dout = Random(c.m * c.k), w = Random(c.k * c.n);
    std::vector<float> pre = Random(c.m * c.n, -3.f, 3.f);
    for (size_t i = 0; i < pre.size(); i += 17) pre[i] *= 5.f;  // some beyond the slope's clamp
    std::vector<float> w_t(c.n * c.k), product(c.m * c.n), want(c.m * c.n);
    cpu::transpose(w_t.data(), w.data(), c.k, c.n);  // matmul_forward multiplies by w_t^T
    cpu::matmul_forward(product.data(), nullptr, dout.data(), w_t.data(), nullptr, c.m,
                        static_cast<int>(c.k), static_cast<int>(c.n), false);
    cpu::gelu_backward(want.data(), product.data(), pre.data(), want.size());

    auto g_dout = Compute(dout, {c.m, c.k}), g_w = Compute(w, {c.k, c.n});
    auto g_pre = Compute(pre, {c.m, c.n}),
         g_din = Compute(std::vector<float>(c.m * c.n), {c.m, c.n});
    const int64_t blocks = c.m / 128;
    auto g_sums = F32(std::vector<float>(blocks * c.n, -1.f), {blocks, c.n});
    cuda::GemmDgeluProblem problem;
    problem.dout = g_dout->tensor().data;
    problem.w = g_w->tensor().data;
    problem.pre = g_pre->tensor().data;
    problem.din = c.in_place ? g_pre->tensor().data : g_din->tensor().data;
    problem.column_partials = c.with_sums ? g_sums->tensor().data : nullptr;
    problem.m = c.m, problem.n = c.n, problem.k = c.k;
    if (!cuda::GemmDgeluSupported(problem)) GTEST_SKIP() << "not an sm_90 GPU";
    // Each split of the slopes between the spare warps and the epilogue (0-4 boxes in the
    // epilogue), alone and in clusters of two where M allows (w's k-blocks shared by multicast);
    // in place, pre is uploaded again for each.
    // With the sums, each of those again with the sums formed in the multipliers' epilogue.
    std::vector<float> first_din;
    for (int run = 0; run < (c.with_sums ? 20 : 10); ++run) {
      const int boxes = run % 5, cluster = 1 + run / 5 % 2;
      const bool sums_in_epilogue = run >= 10;
      if (cluster == 2 && c.m % 256 != 0) continue;
      SCOPED_TRACE("epilogue_slope_boxes " + std::to_string(boxes) + ", cluster " +
                   std::to_string(cluster) + (sums_in_epilogue ? ", sums in the epilogue" : ""));
      problem.cluster = cluster;
      problem.sums_in_epilogue = sums_in_epilogue;
      if (c.in_place)
        g_pre = Compute(pre, {c.m, c.n}), problem.pre = problem.din = g_pre->tensor().data;
      else
        FillWithNan(problem.din, c.m * c.n * 2);  // a tile left unwritten cannot pass for done
      if (c.with_sums) FillWithNan(problem.column_partials, blocks * c.n * 4);
      problem.epilogue_slope_boxes = boxes;
      ASSERT_EQ(cuda::LaunchGemmDgelu(problem, gpu_->stream()), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(gpu_->stream()), cudaSuccess);
      const std::vector<float> din = (c.in_place ? g_pre : g_din)->Download();
      EXPECT_RELATIVE_ERROR_BELOW(din, want, 1e-2);
      // The slope is the same function wherever it is computed, and the tiles' sums the same in
      // clusters: din to the bit.
      if (run == 0) first_din = din;
      EXPECT_BITWISE_EQUAL(din, first_din);
      if (c.with_sums) {
        // Against the CPU's f32 din; and, since the sums are of din as stored, against the GPU's
        // own din, from which they differ only by the f32 rounding of the additions.
        const std::vector<float> sums = g_sums->Download();
        EXPECT_RELATIVE_ERROR_BELOW(sums, BlockColumnSums(want, c.m, c.n), 1e-2);
        EXPECT_RELATIVE_ERROR_BELOW(sums, BlockColumnSums(din, c.m, c.n), 1e-5);
      }
    }
  }
}

TEST_F(CudaSm90GemmTest, GeluForwardMatchesCpuMatmulWithBiasAndGelu) {
  struct Case {
    int64_t m, n, k;
  };
  const Case cases[] = {{128, 256, 192},  {384, 512, 320},  {4096, 2048, 256},
                        {1152, 512, 192}, {1280, 512, 192}, {8192, 1024, 1024}};
  for (const Case& c : cases) {
    SCOPED_TRACE(Trace() + ", M " + std::to_string(c.m) + ", N " + std::to_string(c.n) + ", K " +
                 std::to_string(c.k));
    const std::vector<float> x = Random(c.m * c.k), w = Random(c.n * c.k), bias = Random(c.n);
    std::vector<float> want_pre(c.m * c.n), want_out(c.m * c.n);
    cpu::matmul_forward(want_out.data(), want_pre.data(), x.data(), w.data(), bias.data(), c.m,
                        static_cast<int>(c.k), static_cast<int>(c.n), true);

    auto g_x = Compute(x, {c.m, c.k}), g_w = Compute(w, {c.n, c.k}), g_bias = Compute(bias, {c.n});
    auto g_pre = Compute(std::vector<float>(c.m * c.n), {c.m, c.n});
    auto g_out = Compute(std::vector<float>(c.m * c.n), {c.m, c.n});
    cuda::GemmGeluForwardProblem problem;
    problem.x = g_x->tensor().data;
    problem.w = g_w->tensor().data;
    problem.bias = g_bias->tensor().data;
    problem.pre = g_pre->tensor().data;
    problem.out = g_out->tensor().data;
    problem.m = c.m, problem.n = c.n, problem.k = c.k;
    if (!cuda::GemmGeluForwardSupported(problem)) GTEST_SKIP() << "not an sm_90 GPU";
    // Alone, then in clusters of two where M allows: the same sums, to the bit.
    std::vector<float> first_pre, first_out;
    for (int cluster : {1, 2}) {
      if (cluster == 2 && c.m % 256 != 0) break;
      SCOPED_TRACE("cluster " + std::to_string(cluster));
      problem.cluster = cluster;
      FillWithNan(problem.pre, c.m * c.n * 2);
      FillWithNan(problem.out, c.m * c.n * 2);
      ASSERT_EQ(cuda::LaunchGemmGeluForward(problem, gpu_->stream()), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(gpu_->stream()), cudaSuccess);
      const std::vector<float> pre = g_pre->Download(), out = g_out->Download();
      EXPECT_RELATIVE_ERROR_BELOW(pre, want_pre, 1e-2);
      EXPECT_RELATIVE_ERROR_BELOW(out, want_out, 1e-2);
      if (cluster == 1) {
        first_pre = pre, first_out = out;
      } else {
        EXPECT_BITWISE_EQUAL(pre, first_pre);
        EXPECT_BITWISE_EQUAL(out, first_out);
      }
    }
  }
}

TEST_F(CudaSm90GemmTest, RefusesShapesOffTheirTiles) {
  cuda::GemmDgeluProblem problem;
  auto buffer = Compute(std::vector<float>(512 * 512), {512, 512});
  problem.dout = problem.w = problem.pre = problem.din = buffer->tensor().data;
  problem.m = 256, problem.n = 256, problem.k = 64;
  if (!cuda::GemmDgeluSupported(problem)) GTEST_SKIP() << "not an sm_90 GPU";
  for (auto [m, n, k] : {std::array<int64_t, 3>{200, 256, 64}, {256, 320, 64}, {256, 256, 100}}) {
    problem.m = m, problem.n = n, problem.k = k;
    EXPECT_FALSE(cuda::GemmDgeluSupported(problem)) << m << " x " << n << " x " << k;
    EXPECT_EQ(cuda::LaunchGemmDgelu(problem, nullptr), cudaErrorNotSupported);
  }
  problem.m = 256, problem.n = 256, problem.k = 64;
  for (int boxes : {-1, 5}) {  // a tile has four boxes
    problem.epilogue_slope_boxes = boxes;
    EXPECT_FALSE(cuda::GemmDgeluSupported(problem)) << "epilogue_slope_boxes " << boxes;
  }
  problem.epilogue_slope_boxes = 0;
  for (auto [m, cluster] : {std::array<int, 2>{384, 2}, {256, 3}, {256, 0}}) {  // 1 or 2, M / 256
    problem.m = m, problem.cluster = cluster;
    EXPECT_FALSE(cuda::GemmDgeluSupported(problem)) << "M " << m << ", cluster " << cluster;
    EXPECT_EQ(cuda::LaunchGemmDgelu(problem, nullptr), cudaErrorNotSupported);
  }
  cuda::GemmGeluForwardProblem forward;  // K = 128: fewer k-blocks than the bias slots allow
  forward.x = forward.w = forward.bias = buffer->tensor().data;
  forward.pre = forward.out = buffer->tensor().data;
  forward.m = 256, forward.n = 256, forward.k = 128;
  EXPECT_FALSE(cuda::GemmGeluForwardSupported(forward));
  EXPECT_EQ(cuda::LaunchGemmGeluForward(forward, nullptr), cudaErrorNotSupported);
  forward.m = 384, forward.k = 192, forward.cluster = 2;  // three block rows: not in twos
  EXPECT_FALSE(cuda::GemmGeluForwardSupported(forward));
}
#endif

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
