// Made-up outputs of an MoE router for the tests of its losses (cpu_moe_losses_test.cpp,
// cuda_moe_losses_test.cpp): N tokens' scores over E experts (softmax rows summing to 1, or
// sigmoid values in (0, 1)), K distinct choices per token in ascending order that never name the
// last expert (a zero count), and logsumexps; and the cases of those tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

#include "model/backend.h"

namespace trainer {
namespace testing {

struct RouterOutputs {
  std::vector<float> probs;      // (N,E)
  std::vector<int32_t> experts;  // (N,K)
  std::vector<float> lse;        // (N)
};

// A case of the losses: N tokens in G groups, K of E experts, the scores, the coefficients.
struct MoeLossCase {
  const char* name;
  int64_t N, G;
  int E, K;
  bool sigmoid;
  double aux, z;
  MoeLossCoefficients Coefficients(float loss_scale) const {
    MoeLossCoefficients k;
    k.sigmoid = sigmoid;
    k.aux = aux;
    k.z = z;
    k.loss_scale = loss_scale;
    return k;
  }
};
inline void PrintTo(const MoeLossCase& c, std::ostream* os) {
  *os << c.name;
}

inline RouterOutputs MakeRouterOutputs(int64_t N, int E, int K, bool sigmoid, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> score(0.05f, 1.f), lse(-4.f, 6.f);
  RouterOutputs r;
  r.probs.resize(N * E);
  r.experts.resize(N * K);
  r.lse.resize(N);
  std::vector<int32_t> pool(E - 1);
  for (int64_t t = 0; t < N; ++t) {
    float* p = r.probs.data() + t * E;
    for (int e = 0; e < E; ++e) p[e] = score(rng);
    const float sum = std::accumulate(p, p + E, 0.f);
    if (!sigmoid)
      for (int e = 0; e < E; ++e) p[e] /= sum;
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::sort(pool.begin(), pool.begin() + K);
    std::copy(pool.begin(), pool.begin() + K, r.experts.begin() + t * K);
    r.lse[t] = lse(rng);
  }
  return r;
}

}  // namespace testing
}  // namespace trainer
