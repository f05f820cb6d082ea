// GPU test of the MoE router's losses (Backend::MoeRouterLosses) against the CPU twin
// (cpu/moe.cpp): the load-balancing loss's (G,E) coefficients and value and the z-loss, per
// micro-batch and per sequence, softmax and sigmoid scores, odd sizes (N = 37, E = 5, E = 70 not
// a multiple of the kernel's 32 experts), an expert no token chooses, the z-loss alone, and the
// OLMoE-style bench's micro-batch (N = 16384 tokens, E = 64, top 8). The coefficients depend on
// the counts only and agree to f32 rounding; the values are f64 sums in another order. Two runs
// give the same bits (fixed-order reductions, no atomics).
#include <cstring>

#include "cuda_test_util.h"
#include "moe_router_outputs.h"

namespace trainer {
namespace cuda_testing {
namespace {

constexpr testing::MoeLossCase kLossCases[] = {
    {"softmax odd", 37, 1, 5, 3, false, 0.01, 0.001},
    {"sigmoid per sequence", 36, 4, 5, 3, true, 0.02, 0.001},
    {"z-loss only", 37, 1, 5, 2, false, 0.0, 0.01},
    {"aux only, 70 experts", 1000, 1, 70, 2, false, 0.01, 0.0},
    {"olmoe 64 top 8", 16384, 1, 64, 8, false, 0.01, 0.001},
    {"olmoe per sequence, sigmoid", 16384, 8, 64, 8, true, 0.01, 0.001},
};

class CudaMoeLossesTest : public CudaVsCpuTest {
 protected:
  std::vector<double> DownloadDoubles(const DeviceBuffer& b, size_t n) {
    std::vector<double> out(n);
    EXPECT_TRUE(gpu_->CopyToHost(out.data(), b.tensor().data, n * sizeof(double)).ok());
    return out;
  }
};

TEST_F(CudaMoeLossesTest, RouterLossesMatchCpu) {
  for (const testing::MoeLossCase& c : kLossCases) {
    SCOPED_TRACE(std::string(c.name) + ", " + Trace());
    const int64_t N = c.N, G = c.G;
    const int E = c.E, K = c.K;
    testing::RouterOutputs r = testing::MakeRouterOutputs(N, E, K, c.sigmoid, seed_);
    const MoeLossCoefficients k = c.Coefficients(0.375f);
    const bool aux = c.aux > 0;
    // CPU reference.
    std::vector<float> coef(G * E, -1.f);
    std::vector<double> losses(2, -1.0);
    ASSERT_STATUS_OK(cpu_->MoeRouterLosses(
        aux ? HostView(coef, {G, E}) : Tensor(), Tensor(losses.data(), DType::kF64, {2}),
        HostView(r.experts, {N, K}), HostView(r.probs, {N, E}), HostView(r.lse, {N}), k));
    // GPU.
    auto g_probs = F32(r.probs, {N, E}), g_lse = F32(r.lse, {N});
    auto g_experts = Ints(r.experts, {N, K});
    auto g_coef = F32(std::vector<float>(G * E, -1.f), {G, E});
    DeviceBuffer g_losses(gpu_.get(), DType::kF64, {2});
    ASSERT_STATUS_OK(g_losses.status());
    auto run = [&] {
      return gpu_->MoeRouterLosses(aux ? g_coef->tensor() : Tensor(), g_losses.tensor(),
                                   g_experts->tensor(), g_probs->tensor(), g_lse->tensor(), k);
    };
    ASSERT_STATUS_OK(run());
    const std::vector<double> got = DownloadDoubles(g_losses, 2);
    const std::vector<float> got_coef = g_coef->Download();
    EXPECT_NEAR(got[0], losses[0], 1e-10 * std::fabs(losses[0])) << "the aux loss";
    EXPECT_NEAR(got[1], losses[1], 1e-10 * std::fabs(losses[1])) << "the z-loss";
    if (aux) {
      EXPECT_GT(got[0], 0.0);
      EXPECT_RELATIVE_ERROR_BELOW(got_coef, coef, 1e-6);
      for (int64_t g = 0; g < G; ++g) {
        EXPECT_EQ(got_coef[g * E + E - 1], 0.f) << "the unchosen expert, group " << g;
      }
    } else {
      EXPECT_EQ(got[0], 0.0);
    }
    if (c.z == 0) {
      EXPECT_EQ(got[1], 0.0);
    }
    // Again: the same bits.
    ASSERT_STATUS_OK(run());
    const std::vector<double> again = DownloadDoubles(g_losses, 2);
    EXPECT_EQ(std::memcmp(again.data(), got.data(), 2 * sizeof(double)), 0)
        << "losses, two identical runs";
    EXPECT_BITWISE_EQUAL(g_coef->Download(), got_coef) << "coefficients, two identical runs";
  }
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
