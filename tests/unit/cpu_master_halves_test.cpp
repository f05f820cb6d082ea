// The master weights kept as two halves (common/master_remainder.h, Optimizer.
// store_param_remainders): the high half against round-to-nearest with ties away from zero worked
// out in double, the halves joined giving the f32 back to the bit, and the CPU AdamW on halves
// leaving the same master weights and moments, to the bit, as on f32 master weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/master_remainder.h"
#include "cpu_test_util.h"
#include "model/cpu/cpu_backend.h"

namespace trainer {
namespace {

using testing::RandomFloats;
using testing::View;

uint32_t Bits(float w) {
  uint32_t u;
  std::memcpy(&u, &w, 4);
  return u;
}
float FromBits(uint32_t u) {
  float w;
  std::memcpy(&w, &u, 4);
  return w;
}

// The bf16 nearest w, ties away from zero, by arithmetic in double: the bf16 at or below |w|
// (w's top 16 bits), the distance to it in units of the step to the next bf16 (past the largest
// finite bf16 the step to 2^128, where the rounding overflows to infinity).
uint16_t NearestTiesAway(float w) {
  const uint32_t below = Bits(w) >> 16;
  const double low = std::fabs(static_cast<double>(FromBits(below << 16)));
  const uint32_t next = (below & 0x7fffu) + 1;
  const double high =
      (next >> 7) == 0xff ? std::ldexp(1.0, 128) : std::fabs(double{FromBits(next << 16)});
  const double fraction = (std::fabs(double{w}) - low) / (high - low);
  return static_cast<uint16_t>(fraction >= 0.5 ? below + 1 : below);
}

std::vector<float> Samples() {
  std::vector<float> w;
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    if (((u >> 23) & 0xff) != 0xff) w.push_back(FromBits(u));  // finite
  }
  // Ties (low half 0x8000) above even and odd high halves, both signs; just below and above a
  // tie; zeros, subnormals, the largest finite floats (whose ties overflow), infinities.
  for (uint32_t high : {0x3f80u, 0x3f81u, 0xbf80u, 0xbf81u, 0x0001u, 0x7f7fu, 0xff7fu})
    for (uint32_t low : {0x8000u, 0x7fffu, 0x8001u, 0x0000u, 0xffffu})
      w.push_back(FromBits(high << 16 | low));
  for (float x : {0.f, -0.f, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    w.push_back(x);
  return w;
}

TEST(MasterHalves, HighHalfIsTheNearestBf16TiesAwayFromZero) {
  for (float w : Samples()) {
    if (std::isinf(w)) {
      EXPECT_EQ(MasterHigh(w), Bits(w) >> 16);
      continue;
    }
    ASSERT_EQ(MasterHigh(w), NearestTiesAway(w)) << std::hex << Bits(w);
  }
}

TEST(MasterHalves, JoinedHalvesAreTheMasterToTheBit) {
  for (float w : Samples())
    ASSERT_EQ(Bits(JoinMaster(MasterHigh(w), MasterRemainder(w))), Bits(w)) << std::hex << Bits(w);
  // A NaN stays a NaN in the high half (the weights the model computes with) and when joined.
  for (uint32_t u : {0x7fc00000u, 0x7fffffffu, 0xffff8000u, 0x7f800001u, 0x7fff8000u}) {
    const float nan = FromBits(u);
    EXPECT_TRUE(std::isnan(BF16ToFloat(MasterHigh(nan)))) << std::hex << u;
    EXPECT_TRUE(std::isnan(JoinMaster(MasterHigh(nan), MasterRemainder(nan)))) << std::hex << u;
  }
}

TEST(MasterHalves, BackendOpsSplitAndJoinAsTheScalarFunctions) {
  CpuBackend backend;
  std::vector<float> master = Samples(), joined(master.size(), 0.f);
  const int64_t n = static_cast<int64_t>(master.size());
  std::vector<uint16_t> high(master.size()), low(master.size());
  const Tensor param(high.data(), DType::kBF16, {n}), remainder(low.data(), DType::kU16, {n});
  ASSERT_TRUE(backend.SplitMasterHalves(param, remainder, View(master, {n})).ok());
  ASSERT_TRUE(backend.JoinMasterHalves(View(joined, {n}), param, remainder).ok());
  for (size_t i = 0; i < master.size(); ++i) {
    ASSERT_EQ(high[i], MasterHigh(master[i])) << i;
    ASSERT_EQ(Bits(joined[i]), Bits(master[i])) << i;
  }
  // The remainders' dtype is checked: f32 is refused, naming the operand.
  const Status wrong = backend.JoinMasterHalves(View(joined, {n}), param, View(master, {n}));
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("remainder"), std::string::npos) << wrong.message();
}

// Three steps from the same state: the halves' master weights and moments equal the f32 run's to
// the bit, and the bf16 weights are the master's high halves.
TEST(CpuAdamWHalves, SameMasterWeightsAndMomentsAsF32MasterToTheBit) {
  const size_t n = 1001;
  const int64_t count = static_cast<int64_t>(n);
  CpuBackend backend;
  const std::vector<float> initial = RandomFloats(n, 71);
  std::vector<float> master = initial, m(n, 0.f), v(n, 0.f), mh(n, 0.f), vh(n, 0.f);
  std::vector<uint16_t> high(n), low(n);
  for (size_t i = 0; i < n; ++i)
    high[i] = MasterHigh(master[i]), low[i] = MasterRemainder(master[i]);
  const Tensor param(high.data(), DType::kBF16, {count}),
      remainder(low.data(), DType::kU16, {count});
  AdamWParams p;
  p.lr = 1e-2f;
  p.weight_decay = 0.1f;
  p.grad_scale = 0.75f;
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> grad = RandomFloats(n, 80 + step, -0.3f, 0.3f);
    p.step = step;
    ASSERT_TRUE(backend
                    .AdamW(View(master, {count}), View(master, {count}), View(grad, {count}),
                           View(m, {count}), View(v, {count}), p)
                    .ok());
    ASSERT_TRUE(
        backend
            .AdamW(param, remainder, View(grad, {count}), View(mh, {count}), View(vh, {count}), p)
            .ok());
  }
  size_t moved = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(Bits(JoinMaster(high[i], low[i])), Bits(master[i])) << i;
    ASSERT_EQ(high[i], MasterHigh(master[i])) << i;
    moved += MasterRemainder(master[i]) != MasterRemainder(initial[i]);
  }
  EXPECT_GT(moved, n / 2);  // the steps moved the low halves: the test sees them
  EXPECT_EQ(mh, m);
  EXPECT_EQ(vh, v);
  // A u16 master beside f32 weights is refused.
  std::vector<float> f32(n), grad(n);
  EXPECT_FALSE(backend
                   .AdamW(View(f32, {count}), remainder, View(grad, {count}), View(m, {count}),
                          View(v, {count}), p)
                   .ok());
}

}  // namespace
}  // namespace trainer
