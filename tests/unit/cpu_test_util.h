// Helpers for the CPU backend tests: seeded random data, tensor views over std::vector, double
// precision vectors, central finite differences, and a relative-error comparison that names the
// first offending element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace trainer {
namespace testing {

using DoubleVec = std::vector<double>;

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> RandomInts(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

inline Tensor View(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kF32, dims);
}
inline Tensor View(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kI32, dims);
}

inline DoubleVec ToDouble(const std::vector<float>& v) {
  return DoubleVec(v.begin(), v.end());
}

// d/dx of L(x) = sum_i f(x)_i * weights_i, by central differences in double precision.
inline DoubleVec NumericGradient(const std::function<DoubleVec(const DoubleVec&)>& f, DoubleVec x,
                                 const DoubleVec& weights, double step = 1e-6) {
  auto loss = [&](const DoubleVec& at) {
    const DoubleVec y = f(at);
    double sum = 0.0;
    for (size_t i = 0; i < y.size(); ++i) sum += y[i] * weights[i];
    return sum;
  };
  DoubleVec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + step;
    const double up = loss(x);
    x[i] = saved - step;
    const double down = loss(x);
    x[i] = saved;
    grad[i] = (up - down) / (2 * step);
  }
  return grad;
}

// max_i |got_i - want_i| <= tolerance * max(max_i |want_i|, floor).
inline ::testing::AssertionResult AllClose(const float* got, const DoubleVec& want,
                                           double tolerance, double floor = 1e-6) {
  double scale = floor, worst = 0.0;
  size_t worst_index = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_index = i;
    }
  }
  if (worst <= tolerance * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst_index << ": got " << got[worst_index] << ", want "
         << want[worst_index] << " (error " << worst << " > " << tolerance << " * scale " << scale
         << ", " << want.size() << " elements)";
}
inline ::testing::AssertionResult AllClose(const std::vector<float>& got, const DoubleVec& want,
                                           double tolerance, double floor = 1e-6) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  return AllClose(got.data(), want, tolerance, floor);
}

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof(float)) == 0;
         });
}

}  // namespace testing
}  // namespace trainer
