// CpuBackend tests, part 2: matmul (with and without bias, with GELU), column sums, GELU backward
// and causal attention, against naive double-precision loops and central finite differences of
// them.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <vector>

#include "common/log.h"
#include "cpu_test_util.h"
#include "model/cpu/cpu_backend.h"

namespace trainer {
namespace {

using testing::AllClose;
using testing::DoubleVec;
using testing::NumericGradient;
using testing::RandomFloats;
using testing::ToDouble;
using testing::View;

double GeluReference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// ---- matmul ----

struct MatmulCase {
  int N, C, OC;
  bool bias, gelu;
};
std::ostream& operator<<(std::ostream& os, const MatmulCase& m) {
  return os << "N=" << m.N << " C=" << m.C << " OC=" << m.OC << " bias=" << m.bias
            << " gelu=" << m.gelu;
}

// out (N,OC) = act(in @ W^T + b); bias empty for none.
DoubleVec MatmulReference(const DoubleVec& in, const DoubleVec& w, const DoubleVec& bias,
                          const MatmulCase& m, DoubleVec* pre_act = nullptr) {
  DoubleVec out(static_cast<size_t>(m.N) * m.OC);
  if (pre_act) pre_act->assign(out.size(), 0.0);
  for (int n = 0; n < m.N; ++n)
    for (int o = 0; o < m.OC; ++o) {
      double v = bias.empty() ? 0.0 : bias[o];
      for (int c = 0; c < m.C; ++c) v += in[n * m.C + c] * w[o * m.C + c];
      if (pre_act) (*pre_act)[n * m.OC + o] = v;
      out[n * m.OC + o] = m.gelu ? GeluReference(v) : v;
    }
  return out;
}

class CpuMatmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(CpuMatmul, ForwardAndBackwardMatchFiniteDifferences) {
  const MatmulCase m = GetParam();
  CpuBackend backend;
  std::vector<float> in = RandomFloats(m.N * m.C, 41),
                     w = RandomFloats(m.OC * m.C, 42, -0.3f, 0.3f), b = RandomFloats(m.OC, 43);
  std::vector<float> out(m.N * m.OC, 5.f), pre(m.N * m.OC, 5.f);
  Tensor bias_t = m.bias ? View(b, {m.OC}) : Tensor();
  ASSERT_TRUE(backend
                  .MatmulForward(View(out, {m.N, m.OC}), m.gelu ? View(pre, {m.N, m.OC}) : Tensor(),
                                 View(in, {m.N, m.C}), View(w, {m.OC, m.C}), bias_t,
                                 m.gelu ? Activation::kGelu : Activation::kNone)
                  .ok());
  const DoubleVec ind = ToDouble(in), wd = ToDouble(w), bd = m.bias ? ToDouble(b) : DoubleVec();
  DoubleVec want_pre;
  EXPECT_TRUE(AllClose(out, MatmulReference(ind, wd, bd, m, &want_pre), 1e-5));
  if (m.gelu) {
    EXPECT_TRUE(AllClose(pre, want_pre, 1e-5));
  }

  // Backward: (GELU backward, in place) then matmul backward. din is overwritten; dweight and
  // dbias accumulate.
  const std::vector<float> dout = RandomFloats(out.size(), 44);
  std::vector<float> dlinear = dout;
  if (m.gelu) {
    ASSERT_TRUE(backend
                    .GeluBackward(View(dlinear, {m.N, m.OC}), View(dlinear, {m.N, m.OC}),
                                  View(pre, {m.N, m.OC}))
                    .ok());
  }
  std::vector<float> din(in.size(), 1e3f), dw = RandomFloats(w.size(), 45),
                                           db = RandomFloats(b.size(), 46);
  const std::vector<float> dw0 = dw, db0 = db;
  ASSERT_TRUE(backend
                  .MatmulBackward(View(din, {m.N, m.C}), View(dw, {m.OC, m.C}),
                                  m.bias ? View(db, {m.OC}) : Tensor(), View(dlinear, {m.N, m.OC}),
                                  View(in, {m.N, m.C}), View(w, {m.OC, m.C}),
                                  GradientWrite::kAccumulate)
                  .ok());
  const DoubleVec weights = ToDouble(dout);
  EXPECT_TRUE(
      AllClose(din,
               NumericGradient([&](const DoubleVec& x) { return MatmulReference(x, wd, bd, m); },
                               ind, weights),
               1e-5));
  DoubleVec want_dw = NumericGradient(
      [&](const DoubleVec& x) { return MatmulReference(ind, x, bd, m); }, wd, weights);
  // Written over instead of added to: the old contents (1e3 everywhere) play no part.
  std::vector<float> dw_over(w.size(), 1e3f);
  ASSERT_TRUE(backend
                  .MatmulBackward(Tensor(), View(dw_over, {m.OC, m.C}), Tensor(),
                                  View(dlinear, {m.N, m.OC}), View(in, {m.N, m.C}),
                                  View(w, {m.OC, m.C}), GradientWrite::kOverwrite)
                  .ok());
  EXPECT_TRUE(AllClose(dw_over, want_dw, 1e-5));
  for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += dw0[i];
  EXPECT_TRUE(AllClose(dw, want_dw, 1e-5));
  if (m.bias) {
    DoubleVec want_db = NumericGradient(
        [&](const DoubleVec& x) { return MatmulReference(ind, wd, x, m); }, bd, weights);
    for (size_t i = 0; i < want_db.size(); ++i) want_db[i] += db0[i];
    EXPECT_TRUE(AllClose(db, want_db, 1e-5));
  } else {
    EXPECT_EQ(db, db0);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuMatmul,
                         ::testing::Values(MatmulCase{5, 13, 37, true, false},
                                           MatmulCase{5, 13, 37, false, false},
                                           MatmulCase{4, 9, 40, true, true},
                                           MatmulCase{3, 300, 6, false, true},
                                           MatmulCase{300, 5, 7, true, false}));

// ColumnSums: a block of columns of a wider matrix, with and without row weights, added to what
// the output held.
TEST(CpuColumnSums, WindowAndRowWeightsMatchNaiveLoops) {
  const int N = 37, C = 30, first = 10, W = 11;
  CpuBackend backend;
  std::vector<float> in = RandomFloats(N * C, 61), weights = RandomFloats(N, 62);
  const std::vector<float> out0 = RandomFloats(W, 63);
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "weighted" : "plain");
    std::vector<float> out = out0;
    ASSERT_TRUE(backend
                    .ColumnSums(View(out, {W}), View(in, {N, C}), first,
                                weighted ? View(weights, {N}) : Tensor())
                    .ok());
    DoubleVec want(W, 0.0);
    for (int j = 0; j < W; ++j) {
      want[j] = out0[j];
      for (int n = 0; n < N; ++n) want[j] += (weighted ? weights[n] : 1.0) * in[n * C + first + j];
    }
    EXPECT_TRUE(AllClose(out, want, 1e-5));
  }
  std::vector<float> out(W);
  EXPECT_FALSE(backend.ColumnSums(View(out, {W}), View(in, {N, C}), C - W + 1, Tensor()).ok());
}

// The column-block products (LoRA's adapters on a fused output and on their group's stacked
// x A^T): a block of a wider matrix written or added to in place from a block of another, with
// and without a bias, scaled or not, and the gradients read from and written into blocks in
// place, din written or added to, against naive loops; columns outside the blocks untouched, and
// a block past the edge refused.
TEST(CpuMatmulColumns, BlockProductsMatchNaiveLoops) {
  const int N = 37, R = 5, C = 9, W = 40, first = 13, OC = 11;
  const int RW = 12, r0 = 4;  // in: columns [r0, r0 + R) of (N, RW)
  const int CW = 20, c0 = 7;  // din and x: columns [c0, c0 + C) of (N, CW)
  CpuBackend backend;
  const std::vector<float> out0 = RandomFloats(N * W, 71), din0 = RandomFloats(N * CW, 77),
                           dw0 = RandomFloats(OC * C, 78);
  std::vector<float> in = RandomFloats(N * RW, 72), w = RandomFloats(OC * R, 73),
                     bias = RandomFloats(OC, 79), dout = RandomFloats(N * W, 74),
                     x = RandomFloats(N * CW, 75), wx = RandomFloats(OC * C, 76);
  for (float alpha : {1.f, 0.75f})
    for (bool accumulate : {false, true})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(StrFormat("alpha %g, ", alpha) +
                     (accumulate ? "out added to" : "out written") + (with_bias ? ", bias" : ""));
        std::vector<float> out = out0;
        ASSERT_TRUE(backend
                        .MatmulColumns(
                            Columns(View(out, {N, W}), first, OC),
                            accumulate ? GradientWrite::kAccumulate : GradientWrite::kOverwrite,
                            Columns(View(in, {N, RW}), r0, R), View(w, {OC, R}),
                            with_bias ? View(bias, {OC}) : Tensor(), alpha)
                        .ok());
        DoubleVec want(out0.begin(), out0.end());
        for (int n = 0; n < N; ++n)
          for (int o = 0; o < OC; ++o) {
            double& v = want[n * W + first + o];
            v = (accumulate ? v : 0.0) + (with_bias ? bias[o] : 0.0);
            for (int r = 0; r < R; ++r) v += alpha * double(in[n * RW + r0 + r]) * w[o * R + r];
          }
        EXPECT_TRUE(AllClose(out, want, 1e-5));
      }
  for (float alpha : {1.f, 0.75f})
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(StrFormat("alpha %g, ", alpha) + (accumulate ? "din added to" : "din written"));
      std::vector<float> din = din0, dw = dw0;
      ASSERT_TRUE(backend
                      .MatmulBackwardColumns(
                          Columns(View(din, {N, CW}), c0, C),
                          accumulate ? GradientWrite::kAccumulate : GradientWrite::kOverwrite,
                          View(dw, {OC, C}), Columns(View(dout, {N, W}), first, OC),
                          Columns(View(x, {N, CW}), c0, C), View(wx, {OC, C}), alpha)
                      .ok());
      DoubleVec want_din(din0.begin(), din0.end()), want_dw(dw0.begin(), dw0.end());
      for (int n = 0; n < N; ++n)
        for (int c = 0; c < C; ++c) {
          double& d = want_din[n * CW + c0 + c];
          if (!accumulate) d = 0.0;
          for (int o = 0; o < OC; ++o) {
            d += alpha * double(dout[n * W + first + o]) * wx[o * C + c];
            want_dw[o * C + c] += alpha * double(dout[n * W + first + o]) * x[n * CW + c0 + c];
          }
        }
      EXPECT_TRUE(AllClose(din, want_din, 1e-5));
      EXPECT_TRUE(AllClose(dw, want_dw, 1e-5));
    }
  std::vector<float> out = out0;
  EXPECT_FALSE(backend
                   .MatmulColumns(Columns(View(out, {N, W}), W - OC + 1, OC),
                                  GradientWrite::kAccumulate, Columns(View(in, {N, RW}), r0, R),
                                  View(w, {OC, R}), Tensor())
                   .ok());
  EXPECT_FALSE(backend
                   .MatmulColumns(Columns(View(out, {N, W}), first, OC),
                                  GradientWrite::kAccumulate, Columns(View(in, {N, RW}), r0, R + 1),
                                  View(w, {OC, R}), Tensor())
                   .ok());
}

// Shapes spanning several cache blocks in every dimension (rows, columns, k), checked against
// the closed-form gradients computed by naive loops.
TEST(CpuMatmulLarge, BlockedProductsMatchNaiveLoops) {
  const int N = 70, C = 300, OC = 260;
  CpuBackend backend;
  std::vector<float> in = RandomFloats(N * C, 51), w = RandomFloats(OC * C, 52),
                     b = RandomFloats(OC, 53), out(N * OC), dout = RandomFloats(N * OC, 54);
  ASSERT_TRUE(backend
                  .MatmulForward(View(out, {N, OC}), Tensor(), View(in, {N, C}), View(w, {OC, C}),
                                 View(b, {OC}), Activation::kNone)
                  .ok());
  const MatmulCase m{N, C, OC, true, false};
  EXPECT_TRUE(AllClose(out, MatmulReference(ToDouble(in), ToDouble(w), ToDouble(b), m), 1e-5));

  std::vector<float> din(N * C), dw(OC * C, 0.f), db(OC, 0.f);
  ASSERT_TRUE(backend
                  .MatmulBackward(View(din, {N, C}), View(dw, {OC, C}), View(db, {OC}),
                                  View(dout, {N, OC}), View(in, {N, C}), View(w, {OC, C}),
                                  GradientWrite::kAccumulate)
                  .ok());
  DoubleVec want_din(N * C, 0.0), want_dw(OC * C, 0.0), want_db(OC, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      const double g = dout[n * OC + o];
      want_db[o] += g;
      for (int c = 0; c < C; ++c) {
        want_din[n * C + c] += g * w[o * C + c];
        want_dw[o * C + c] += g * in[n * C + c];
      }
    }
  EXPECT_TRUE(AllClose(din, want_din, 1e-5));
  EXPECT_TRUE(AllClose(dw, want_dw, 1e-5));
  EXPECT_TRUE(AllClose(db, want_db, 1e-5));
  // Skipping din leaves it untouched and still accumulates the weight gradient.
  std::vector<float> dw2 = dw;
  ASSERT_TRUE(backend
                  .MatmulBackward(Tensor(), View(dw2, {OC, C}), Tensor(), View(dout, {N, OC}),
                                  View(in, {N, C}), View(w, {OC, C}), GradientWrite::kAccumulate)
                  .ok());
  for (double& x : want_dw) x *= 2;
  EXPECT_TRUE(AllClose(dw2, want_dw, 1e-5));
}

TEST(CpuGelu, BackwardMatchesFiniteDifferences) {
  CpuBackend backend;
  std::vector<float> x = RandomFloats(200, 61, -5.f, 5.f), dy = RandomFloats(200, 62), dx(200);
  ASSERT_TRUE(backend.GeluBackward(View(dx, {200}), View(dy, {200}), View(x, {200})).ok());
  const DoubleVec want = NumericGradient(
      [](const DoubleVec& v) {
        DoubleVec y(v.size());
        for (size_t i = 0; i < v.size(); ++i) y[i] = GeluReference(v[i]);
        return y;
      },
      ToDouble(x), ToDouble(dy));
  EXPECT_TRUE(AllClose(dx, want, 1e-5));
}

// ---- attention ----

struct AttentionCase {
  int B, T, NH, HS;
};
std::ostream& operator<<(std::ostream& os, const AttentionCase& a) {
  return os << "B=" << a.B << " T=" << a.T << " NH=" << a.NH << " HS=" << a.HS;
}

// Causal softmax(q k^T / sqrt(HS)) v per head; lse (B,NH,T) = log sum exp of the scaled scores.
DoubleVec AttentionReference(const DoubleVec& qkv, const AttentionCase& a,
                             DoubleVec* lse = nullptr) {
  const int C = a.NH * a.HS;
  DoubleVec out(static_cast<size_t>(a.B) * a.T * C, 0.0);
  if (lse) lse->assign(static_cast<size_t>(a.B) * a.NH * a.T, 0.0);
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(static_cast<size_t>(b) * a.T + t) * 3 * C + part * C + h * a.HS + i];
  };
  for (int b = 0; b < a.B; ++b)
    for (int h = 0; h < a.NH; ++h)
      for (int t = 0; t < a.T; ++t) {
        std::vector<double> score(t + 1);
        double max_score = -INFINITY, sum = 0.0;
        for (int s = 0; s <= t; ++s) {
          double d = 0.0;
          for (int i = 0; i < a.HS; ++i) d += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          score[s] = d / std::sqrt(static_cast<double>(a.HS));
          max_score = std::max(max_score, score[s]);
        }
        for (int s = 0; s <= t; ++s) sum += std::exp(score[s] - max_score);
        for (int s = 0; s <= t; ++s)
          for (int i = 0; i < a.HS; ++i)
            out[(static_cast<size_t>(b) * a.T + t) * C + h * a.HS + i] +=
                std::exp(score[s] - max_score) / sum * at(b, s, 2, h, i);
        if (lse) (*lse)[(static_cast<size_t>(b) * a.NH + h) * a.T + t] = max_score + std::log(sum);
      }
  return out;
}

class CpuAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CpuAttention, ForwardAndBackwardMatchFiniteDifferences) {
  const AttentionCase a = GetParam();
  const int C = a.NH * a.HS;
  CpuBackend backend;
  std::vector<float> qkv = RandomFloats(a.B * a.T * 3 * C, 71, -1.5f, 1.5f);
  std::vector<float> out(a.B * a.T * C, 7.f), stats(a.B * a.NH * a.T, 7.f);
  ASSERT_TRUE(backend
                  .AttentionForward(View(out, {a.B, a.T, C}), View(stats, {a.B, a.NH, a.T}),
                                    View(qkv, {a.B, a.T, 3 * C}), a.NH)
                  .ok());
  const DoubleVec qkvd = ToDouble(qkv);
  DoubleVec want_lse;
  EXPECT_TRUE(AllClose(out, AttentionReference(qkvd, a, &want_lse), 1e-5));
  EXPECT_TRUE(AllClose(stats, want_lse, 1e-5));

  const std::vector<float> dout = RandomFloats(out.size(), 72);
  std::vector<float> dout_copy = dout, dqkv(qkv.size(), 1e3f);  // overwritten
  ASSERT_TRUE(backend
                  .AttentionBackward(View(dqkv, {a.B, a.T, 3 * C}), View(dout_copy, {a.B, a.T, C}),
                                     View(qkv, {a.B, a.T, 3 * C}), View(out, {a.B, a.T, C}),
                                     View(stats, {a.B, a.NH, a.T}), a.NH)
                  .ok());
  EXPECT_TRUE(AllClose(dqkv,
                       NumericGradient([&](const DoubleVec& x) { return AttentionReference(x, a); },
                                       qkvd, ToDouble(dout)),
                       1e-4));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuAttention,
                         ::testing::Values(AttentionCase{1, 1, 1, 4}, AttentionCase{1, 9, 1, 8},
                                           AttentionCase{2, 7, 3, 4}, AttentionCase{3, 13, 3, 5},
                                           AttentionCase{2, 16, 1, 16},
                                           AttentionCase{1, 67, 2, 3}));  // 2 query blocks

}  // namespace
}  // namespace trainer
