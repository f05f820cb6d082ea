// CpuBackend tests of the MoE router's losses (Backend::MoeRouterLosses): the load-balancing
// loss's coefficients and value and the z-loss against the switch-transformer formula evaluated
// here in double, per expert: over G groups of n tokens, loss = mean over the groups of
// coeff * E / (K n^2) * sum_e P_e f_e (P_e the sum of the group's scores for e, sigmoid scores
// normalised per token; f_e the group's choices of e), coef (g,e) = loss_scale * dloss/dP_e;
// z = z_coeff * mean of lse^2. Per micro-batch (G = 1) and per sequence, softmax and sigmoid
// scores, an expert no token chooses; the same bits on every call; bad shapes refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "model/backend.h"
#include "moe_router_outputs.h"

namespace trainer {
namespace {

using testing::View;

using LossCase = testing::MoeLossCase;
constexpr LossCase kCases[] = {
    {"softmax per micro-batch", 48, 1, 6, 2, false, 0.01, 0.001},
    {"softmax per sequence", 48, 4, 6, 2, false, 0.02, 0.0},
    {"sigmoid per micro-batch", 40, 1, 5, 3, true, 0.01, 0.002},
    {"sigmoid per sequence", 40, 5, 5, 3, true, 0.03, 0.001},
    {"top 1, z only", 30, 1, 4, 1, false, 0.0, 0.01},
};

using Routed = testing::RouterOutputs;
Routed Route(const LossCase& c, uint32_t seed) {
  return testing::MakeRouterOutputs(c.N, c.E, c.K, c.sigmoid, seed);
}

// The formula, per group and expert, in double: {aux loss, z loss}, and coef (G,E).
std::vector<double> Naive(const LossCase& c, const Routed& r, float loss_scale,
                          std::vector<double>* coef) {
  const int64_t n = c.N / c.G;
  const double scale = c.aux * c.E / (double(c.K) * n * n);
  double aux = 0, z = 0;
  coef->assign(c.G * c.E, 0.0);
  for (int64_t g = 0; g < c.G; ++g) {
    double group_loss = 0;
    for (int e = 0; e < c.E; ++e) {
      double P = 0, f = 0;
      for (int64_t t = g * n; t < (g + 1) * n; ++t) {
        double row = 0;
        for (int j = 0; j < c.E; ++j) row += r.probs[t * c.E + j];
        P += r.probs[t * c.E + e] / (c.sigmoid ? row : 1.0);
        for (int k = 0; k < c.K; ++k) f += r.experts[t * c.K + k] == e;
      }
      group_loss += scale * P * f;
      (*coef)[g * c.E + e] = loss_scale * scale * f / c.G;
    }
    aux += group_loss / c.G;
  }
  for (float v : r.lse) z += double(v) * v;
  return {aux, c.z * z / c.N};
}

class CpuMoeLosses : public ::testing::TestWithParam<LossCase> {};

TEST_P(CpuMoeLosses, MatchTheFormulaInDouble) {
  const LossCase& c = GetParam();
  const std::unique_ptr<Backend> cpu = MakeCpuBackend();
  Routed r = Route(c, 11);
  const float loss_scale = 0.125f;
  std::vector<float> coef(c.G * c.E, -1.f);
  std::vector<double> losses(2, -1.0);
  const MoeLossCoefficients k = c.Coefficients(loss_scale);
  const Tensor aux_coef = c.aux > 0 ? View(coef, {c.G, c.E}) : Tensor();
  auto run = [&] {
    return cpu->MoeRouterLosses(aux_coef, Tensor(losses.data(), DType::kF64, {2}),
                                View(r.experts, {c.N, c.K}), View(r.probs, {c.N, c.E}),
                                View(r.lse, {c.N}), k);
  };
  ASSERT_TRUE(run().ok());
  std::vector<double> want_coef;
  const std::vector<double> want = Naive(c, r, loss_scale, &want_coef);
  EXPECT_NEAR(losses[0], want[0], 1e-12 * std::fabs(want[0]));
  EXPECT_NEAR(losses[1], want[1], 1e-12 * std::fabs(want[1]));
  if (c.aux > 0) {
    EXPECT_GT(losses[0], 0);
    for (int64_t i = 0; i < c.G * c.E; ++i) {
      EXPECT_NEAR(coef[i], want_coef[i], 1e-6 * std::fabs(want_coef[i])) << "coef " << i;
      if (i % c.E == c.E - 1) {
        EXPECT_EQ(coef[i], 0.f) << "the unchosen expert, group " << i / c.E;
      }
    }
  } else {
    EXPECT_EQ(losses[0], 0.0);
  }
  if (c.z == 0) {
    EXPECT_EQ(losses[1], 0.0);
  }
  // The same inputs, the same bits.
  const std::vector<double> first = losses;
  const std::vector<float> first_coef = coef;
  ASSERT_TRUE(run().ok());
  EXPECT_EQ(std::memcmp(first.data(), losses.data(), 16), 0);
  EXPECT_EQ(std::memcmp(first_coef.data(), coef.data(), coef.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Routers, CpuMoeLosses, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LossCase>& info) {
                           std::string s = info.param.name;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(CpuMoeLossesContract, BadShapesAreRefused) {
  const std::unique_ptr<Backend> cpu = MakeCpuBackend();
  const LossCase c = kCases[0];
  Routed r = Route(c, 3);
  std::vector<float> coef(c.G * c.E), odd(5 * c.E), narrow(c.E - 1);
  std::vector<double> losses(2);
  const MoeLossCoefficients k = c.Coefficients(1.f);
  auto run = [&](Tensor aux_coef, const MoeLossCoefficients& kk) {
    return cpu->MoeRouterLosses(aux_coef, Tensor(losses.data(), DType::kF64, {2}),
                                View(r.experts, {c.N, c.K}), View(r.probs, {c.N, c.E}),
                                View(r.lse, {c.N}), kk);
  };
  EXPECT_TRUE(run(View(coef, {1, c.E}), k).ok());
  const Status no_coef = run(Tensor(), k);
  EXPECT_FALSE(no_coef.ok());
  EXPECT_NE(no_coef.message().find("aux_coef"), std::string::npos) << no_coef.message();
  EXPECT_FALSE(run(View(odd, {5, c.E}), k).ok()) << "5 groups do not divide 48 rows";
  EXPECT_FALSE(run(View(narrow, {1, c.E - 1}), k).ok()) << "one expert short";
  MoeLossCoefficients none;
  EXPECT_FALSE(run(View(coef, {1, c.E}), none).ok()) << "coefficients without an aux loss";
  std::vector<float> f32_losses(2);
  EXPECT_FALSE(cpu->MoeRouterLosses(View(coef, {1, c.E}), View(f32_losses, {2}),
                                    View(r.experts, {c.N, c.K}), View(r.probs, {c.N, c.E}),
                                    View(r.lse, {c.N}), k)
                   .ok())
      << "losses must be f64";
}

}  // namespace
}  // namespace trainer
