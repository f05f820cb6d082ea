// Vectorisation helpers of the CPU kernels.
// - TRAINER_CPU_CLONES: compile a function for AVX-512, AVX2+FMA and baseline x86-64, picked at
//   load time (GCC target_clones), since the build does not use -march=native. Put it on the
//   serial per-chunk functions, not on functions holding `omp parallel` (outlined regions are not
//   cloned).
// - SimdExp: expf written as plain arithmetic (range reduction by ln 2 and a degree-6 polynomial,
//   Cephes-style, within 1 ulp of the exact value), so that loops calling it vectorize under
//   `#pragma omp simd` without -ffast-math. Unlike a libm call, a vector lane and the scalar
//   remainder of a loop give the same bits, which keeps the kernels' results independent of how
//   the work is split over threads. Inputs are clamped to [-87.3, 88.4] (so exp(-inf) is 1.2e-38,
//   not 0); NaN stays NaN.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TRAINER_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TRAINER_CPU_CLONES
#endif

namespace trainer {
namespace cpu {

inline float SimdExp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // ln 2 = kLn2High + kLn2Low, kLn2High exact in 9 bits
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kMax = 88.3762626647949f;
  constexpr float kMin = -87.3365447505531f;  // exp(kMin) is the smallest normal float
  constexpr float kRound = 12582912.f;        // 1.5 * 2^23: adding it rounds to an integer
  constexpr uint32_t kRoundBits = 0x4B400000u;
  const float clamped = std::min(std::max(x, kMin), kMax);  // keeps NaN
  const float shifted = clamped * kLog2e + kRound;  // n = round(x / ln 2) in the low mantissa bits
  const float n = shifted - kRound;
  const float r = (clamped - n * kLn2High) - n * kLn2Low;  // |r| <= ln2 / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * r * r + r + 1.f;
  uint32_t bits;  // 2^n: exponent field n + 127
  std::memcpy(&bits, &shifted, sizeof(bits));
  bits = (bits - kRoundBits + 127u) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return exp_r * two_n;
}

}  // namespace cpu
}  // namespace trainer
