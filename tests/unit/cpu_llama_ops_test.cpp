// CpuBackend tests, part 3: the Llama-family ops (RMSNorm, the per-head q/k norm, RoPE, SwiGLU,
// grouped-query attention). Each forward is compared with a naive double-precision loop written
// here (RoPE with a complex rotation), each backward with central finite differences of that
// loop; GQA also with multi-head attention on the kv heads repeated for their query groups. The
// backward ops give the same bits for 1 and 4 threads, and the contracts reject bad shapes.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <complex>
#include <ostream>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "model/cpu/cpu_backend.h"

namespace trainer {
namespace {

using testing::AllClose;
using testing::BitwiseEqual;
using testing::DoubleVec;
using testing::NumericGradient;
using testing::RandomFloats;
using testing::ToDouble;
using testing::View;

constexpr float kEps = 1e-6f;

DoubleVec Plus(DoubleVec a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// ---- RMSNorm ----

// out (N,C) = w * x / sqrt(mean(x^2) + eps) per row of x (N,C); rstd (N) optional.
DoubleVec RmsNormReference(const DoubleVec& in, const DoubleVec& w, int N, int C,
                           DoubleVec* rstd = nullptr) {
  DoubleVec out(in.size());
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; ++n) {
    double sq = 0.0;
    for (int c = 0; c < C; ++c) sq += in[n * C + c] * in[n * C + c];
    const double r = 1.0 / std::sqrt(sq / C + kEps);
    for (int c = 0; c < C; ++c) out[n * C + c] = w[c] * in[n * C + c] * r;
    if (rstd) (*rstd)[n] = r;
  }
  return out;
}

struct NormCase {
  int N, C;
};
std::ostream& operator<<(std::ostream& os, const NormCase& c) {
  return os << "N=" << c.N << " C=" << c.C;
}

class CpuRmsNorm : public ::testing::TestWithParam<NormCase> {};

TEST_P(CpuRmsNorm, ForwardAndBackwardMatchFiniteDifferences) {
  const auto [N, C] = GetParam();
  CpuBackend backend;
  std::vector<float> in = RandomFloats(N * C, 11, -2.f, 2.f), w = RandomFloats(C, 12, 0.5f, 1.5f);
  std::vector<float> out(N * C, 7.f), rstd(N, 7.f);
  ASSERT_TRUE(
      backend
          .RmsNormForward(View(out, {N, C}), View(rstd, {N}), View(in, {N, C}), View(w, {C}), kEps)
          .ok());
  const DoubleVec ind = ToDouble(in), wd = ToDouble(w);
  DoubleVec want_rstd;
  EXPECT_TRUE(AllClose(out, RmsNormReference(ind, wd, N, C, &want_rstd), 1e-5));
  EXPECT_TRUE(AllClose(rstd, want_rstd, 1e-5));

  // din and dweight accumulate onto what they held.
  const std::vector<float> dout = RandomFloats(N * C, 13), din0 = RandomFloats(N * C, 14),
                           dw0 = RandomFloats(C, 15);
  std::vector<float> din = din0, dw = dw0, dout_copy = dout;
  ASSERT_TRUE(backend
                  .RmsNormBackward(View(din, {N, C}), View(dw, {C}), View(dout_copy, {N, C}),
                                   View(in, {N, C}), View(w, {C}), View(rstd, {N}))
                  .ok());
  const DoubleVec weights = ToDouble(dout);
  const DoubleVec want_din = NumericGradient(
      [&](const DoubleVec& x) { return RmsNormReference(x, wd, N, C); }, ind, weights);
  const DoubleVec want_dw = NumericGradient(
      [&](const DoubleVec& x) { return RmsNormReference(ind, x, N, C); }, wd, weights);
  EXPECT_TRUE(AllClose(din, Plus(want_din, din0), 1e-5));
  EXPECT_TRUE(AllClose(dw, Plus(want_dw, dw0), 1e-5));

  // AddRmsNormForward: residual = a + b (here over a itself), then the norm of it.
  std::vector<float> a = RandomFloats(N * C, 16), b = RandomFloats(N * C, 17), out2(N * C);
  DoubleVec sum(N * C);
  for (int i = 0; i < N * C; ++i) sum[i] = static_cast<double>(a[i]) + b[i];
  ASSERT_TRUE(backend
                  .AddRmsNormForward(View(a, {N, C}), View(out2, {N, C}), View(rstd, {N}),
                                     View(a, {N, C}), View(b, {N, C}), View(w, {C}), kEps)
                  .ok());
  EXPECT_TRUE(AllClose(a, sum, 1e-6));
  EXPECT_TRUE(AllClose(out2, RmsNormReference(sum, wd, N, C, &want_rstd), 1e-5));
  EXPECT_TRUE(AllClose(rstd, want_rstd, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuRmsNorm,
                         ::testing::Values(NormCase{1, 1}, NormCase{3, 7}, NormCase{5, 64},
                                           NormCase{17, 33}, NormCase{2, 129}));

// ---- per-head q/k norm ----

struct HeadsCase {
  int B, T, NH, NKV, HD;
};
std::ostream& operator<<(std::ostream& os, const HeadsCase& c) {
  return os << "B=" << c.B << " T=" << c.T << " NH=" << c.NH << " NKV=" << c.NKV << " HD=" << c.HD;
}

// RMSNorm of each q head (qw) and k head (kw) of each row of in (N,(NH+2*NKV)*HD), v copied;
// rstd (N, NH+NKV) optional.
DoubleVec QkNormReference(const DoubleVec& in, const DoubleVec& qw, const DoubleVec& kw,
                          const HeadsCase& c, DoubleVec* rstd = nullptr) {
  const int N = c.B * c.T, W = (c.NH + 2 * c.NKV) * c.HD, heads = c.NH + c.NKV;
  DoubleVec out = in;
  if (rstd) rstd->assign(static_cast<size_t>(N) * heads, 0.0);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < heads; ++j) {
      const DoubleVec head(in.begin() + n * W + j * c.HD, in.begin() + n * W + (j + 1) * c.HD);
      DoubleVec r;
      const DoubleVec y = RmsNormReference(head, j < c.NH ? qw : kw, 1, c.HD, &r);
      std::copy(y.begin(), y.end(), out.begin() + n * W + j * c.HD);
      if (rstd) (*rstd)[n * heads + j] = r[0];
    }
  return out;
}

class CpuQkNorm : public ::testing::TestWithParam<HeadsCase> {};

TEST_P(CpuQkNorm, ForwardAndBackwardMatchFiniteDifferences) {
  const HeadsCase c = GetParam();
  const int N = c.B * c.T, W = (c.NH + 2 * c.NKV) * c.HD, heads = c.NH + c.NKV;
  CpuBackend backend;
  std::vector<float> in = RandomFloats(N * W, 21, -2.f, 2.f),
                     qw = RandomFloats(c.HD, 22, 0.5f, 2.f), kw = RandomFloats(c.HD, 23, 0.5f, 2.f);
  std::vector<float> out(N * W, 7.f), rstd(N * heads, 7.f);
  ASSERT_TRUE(backend
                  .QkNormForward(View(out, {c.B, c.T, W}), View(rstd, {N, heads}),
                                 View(in, {c.B, c.T, W}), View(qw, {c.HD}), View(kw, {c.HD}), c.NH,
                                 c.NKV, kEps)
                  .ok());
  const DoubleVec ind = ToDouble(in), qwd = ToDouble(qw), kwd = ToDouble(kw);
  DoubleVec want_rstd;
  EXPECT_TRUE(AllClose(out, QkNormReference(ind, qwd, kwd, c, &want_rstd), 1e-5));
  EXPECT_TRUE(AllClose(rstd, want_rstd, 1e-5));

  // din overwritten; dq_weight and dk_weight accumulate.
  const std::vector<float> dout = RandomFloats(N * W, 24), dqw0 = RandomFloats(c.HD, 25),
                           dkw0 = RandomFloats(c.HD, 26);
  std::vector<float> din(N * W, 1e3f), dqw = dqw0, dkw = dkw0, dout_copy = dout;
  auto backward = [&](std::vector<float>& d, std::vector<float>& g) {
    return backend.QkNormBackward(View(d, {c.B, c.T, W}), View(dqw, {c.HD}), View(dkw, {c.HD}),
                                  View(g, {c.B, c.T, W}), View(in, {c.B, c.T, W}), View(qw, {c.HD}),
                                  View(kw, {c.HD}), View(rstd, {N, heads}), c.NH, c.NKV);
  };
  ASSERT_TRUE(backward(din, dout_copy).ok());
  EXPECT_EQ(dout_copy, dout);
  const DoubleVec weights = ToDouble(dout);
  EXPECT_TRUE(
      AllClose(din,
               NumericGradient([&](const DoubleVec& x) { return QkNormReference(x, qwd, kwd, c); },
                               ind, weights),
               1e-5));
  const DoubleVec want_dqw = NumericGradient(
      [&](const DoubleVec& x) { return QkNormReference(ind, x, kwd, c); }, qwd, weights);
  const DoubleVec want_dkw = NumericGradient(
      [&](const DoubleVec& x) { return QkNormReference(ind, qwd, x, c); }, kwd, weights);
  EXPECT_TRUE(AllClose(dqw, Plus(want_dqw, dqw0), 1e-5));
  EXPECT_TRUE(AllClose(dkw, Plus(want_dkw, dkw0), 1e-5));

  // In place over dout: the same bits.
  ASSERT_TRUE(backward(dout_copy, dout_copy).ok());
  EXPECT_TRUE(BitwiseEqual(dout_copy, din));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuQkNorm,
                         ::testing::Values(HeadsCase{1, 1, 1, 1, 1}, HeadsCase{1, 3, 2, 1, 4},
                                           HeadsCase{2, 3, 4, 2, 7}, HeadsCase{1, 2, 3, 3, 16},
                                           HeadsCase{3, 2, 6, 2, 37}));

// ---- RoPE ----

// angle(t, i) = t * 10000^(-2i/HD), the Llama frequencies.
double RopeAngle(int t, int i, int HD) {
  return t * std::pow(10000.0, -2.0 * i / HD);
}

// cos_sin (2, P, HD/2) in f32.
std::vector<float> RopeTable(int P, int HD) {
  const int half = HD / 2;
  std::vector<float> table(2 * P * half);
  for (int t = 0; t < P; ++t)
    for (int i = 0; i < half; ++i) {
      table[t * half + i] = static_cast<float>(std::cos(RopeAngle(t, i, HD)));
      table[(P + t) * half + i] = static_cast<float>(std::sin(RopeAngle(t, i, HD)));
    }
  return table;
}

// Each pair (x_i, x_{i+HD/2}) of a q or k head as the complex number x_i + i x_{i+HD/2}, times
// e^(i sign angle(t, i)); v heads unchanged. With starts (B*T, Data.packing: documents) token t
// of sample b is at position t - starts[b*T+t].
DoubleVec RopeReference(const DoubleVec& in, const HeadsCase& c, double sign,
                        const std::vector<int32_t>* starts = nullptr) {
  const int W = (c.NH + 2 * c.NKV) * c.HD, half = c.HD / 2;
  DoubleVec out = in;
  for (int b = 0; b < c.B; ++b)
    for (int t = 0; t < c.T; ++t)
      for (int j = 0; j < c.NH + c.NKV; ++j)
        for (int i = 0; i < half; ++i) {
          const size_t at = (static_cast<size_t>(b) * c.T + t) * W + j * c.HD + i;
          const int pos = t - (starts ? (*starts)[static_cast<size_t>(b) * c.T + t] : 0);
          const std::complex<double> z = std::complex<double>(in[at], in[at + half]) *
                                         std::polar(1.0, sign * RopeAngle(pos, i, c.HD));
          out[at] = z.real();
          out[at + half] = z.imag();
        }
  return out;
}

class CpuRope : public ::testing::TestWithParam<HeadsCase> {};

TEST_P(CpuRope, RotatesLikeComplexNumbersAndInverts) {
  const HeadsCase c = GetParam();
  const int W = (c.NH + 2 * c.NKV) * c.HD, P = c.T + 3;
  CpuBackend backend;
  std::vector<float> table = RopeTable(P, c.HD);
  const Tensor cos_sin = View(table, {2, P, c.HD / 2});
  const std::vector<float> x = RandomFloats(c.B * c.T * W, 31, -2.f, 2.f);
  std::vector<float> y = x;
  ASSERT_TRUE(backend.RopeForward(View(y, {c.B, c.T, W}), cos_sin, c.NH, c.NKV).ok());
  EXPECT_TRUE(AllClose(y, RopeReference(ToDouble(x), c, 1.0), 1e-5));
  // The v heads are left alone.
  for (int n = 0; n < c.B * c.T; ++n)
    for (int i = (c.NH + c.NKV) * c.HD; i < W; ++i) ASSERT_EQ(y[n * W + i], x[n * W + i]);
  // The inverse undoes it.
  ASSERT_TRUE(backend.RopeBackward(View(y, {c.B, c.T, W}), cos_sin, c.NH, c.NKV).ok());
  EXPECT_TRUE(AllClose(y, ToDouble(x), 1e-6));

  // The backward of the gradient: the transposed rotation = the finite differences of the forward
  // (and a rotation by minus the angle).
  std::vector<float> g = RandomFloats(x.size(), 32);
  const DoubleVec weights = ToDouble(g);
  ASSERT_TRUE(backend.RopeBackward(View(g, {c.B, c.T, W}), cos_sin, c.NH, c.NKV).ok());
  EXPECT_TRUE(AllClose(g, RopeReference(weights, c, -1.0), 1e-5));
  EXPECT_TRUE(AllClose(g,
                       NumericGradient([&](const DoubleVec& v) { return RopeReference(v, c, 1.0); },
                                       ToDouble(x), weights),
                       1e-5));
}

// Data.packing: documents: positions count from each document's start (sample 0: documents at
// 0, 3 and 7; sample 1 starts mid-document, then a document at 5).
TEST(CpuRopeDocuments, PositionsRestartAtEachDocument) {
  const HeadsCase c{2, 9, 4, 2, 6};
  const int W = (c.NH + 2 * c.NKV) * c.HD;
  const std::vector<int32_t> starts = {0, 0, 0, 3, 3, 3, 3, 7, 7, 0, 0, 0, 0, 0, 5, 5, 5, 5};
  CpuBackend backend;
  std::vector<float> table = RopeTable(c.T, c.HD);
  const Tensor cos_sin = View(table, {2, c.T, c.HD / 2});
  std::vector<int32_t> s = starts;
  const Tensor doc_starts(s.data(), DType::kI32, {c.B, c.T});
  const std::vector<float> x = RandomFloats(c.B * c.T * W, 33, -2.f, 2.f);
  std::vector<float> y = x;
  ASSERT_TRUE(backend.RopeForward(View(y, {c.B, c.T, W}), cos_sin, c.NH, c.NKV, doc_starts).ok());
  EXPECT_TRUE(AllClose(y, RopeReference(ToDouble(x), c, 1.0, &starts), 1e-5));
  EXPECT_FALSE(AllClose(y, RopeReference(ToDouble(x), c, 1.0), 1e-3));  // the restart matters
  std::vector<float> g = x;
  ASSERT_TRUE(backend.RopeBackward(View(g, {c.B, c.T, W}), cos_sin, c.NH, c.NKV, doc_starts).ok());
  EXPECT_TRUE(AllClose(g, RopeReference(ToDouble(x), c, -1.0, &starts), 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuRope,
                         ::testing::Values(HeadsCase{1, 1, 1, 1, 2}, HeadsCase{2, 5, 2, 1, 8},
                                           HeadsCase{3, 7, 4, 2, 6}, HeadsCase{2, 9, 3, 3, 10},
                                           HeadsCase{1, 13, 6, 2, 18}));

// ---- SwiGLU ----

double Silu(double x) {
  return x / (1.0 + std::exp(-x));
}

// out (N,F) = silu(gate) * up over gate_up (N,2F).
DoubleVec SwiGluReference(const DoubleVec& gate_up, int N, int F) {
  DoubleVec out(static_cast<size_t>(N) * F);
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f)
      out[n * F + f] = Silu(gate_up[n * 2 * F + f]) * gate_up[n * 2 * F + F + f];
  return out;
}

class CpuSwiGlu : public ::testing::TestWithParam<NormCase> {};

TEST_P(CpuSwiGlu, ForwardAndBackwardMatchFiniteDifferences) {
  const auto [N, F] = GetParam();
  CpuBackend backend;
  std::vector<float> gu = RandomFloats(N * 2 * F, 41, -6.f, 6.f), out(N * F, 7.f);
  ASSERT_TRUE(backend.SwiGluForward(View(out, {N, F}), View(gu, {N, 2 * F})).ok());
  const DoubleVec gud = ToDouble(gu);
  EXPECT_TRUE(AllClose(out, SwiGluReference(gud, N, F), 1e-5));

  std::vector<float> dout = RandomFloats(N * F, 42), dgu(N * 2 * F, 1e3f);  // overwritten
  ASSERT_TRUE(
      backend.SwiGluBackward(View(dgu, {N, 2 * F}), View(dout, {N, F}), View(gu, {N, 2 * F})).ok());
  EXPECT_TRUE(AllClose(dgu,
                       NumericGradient([&](const DoubleVec& x) { return SwiGluReference(x, N, F); },
                                       gud, ToDouble(dout)),
                       1e-5));
  // The analytic form: [dout up sig (1 + g (1 - sig)) | dout silu(g)].
  DoubleVec want(dgu.size());
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double g = gud[n * 2 * F + f], u = gud[n * 2 * F + F + f], d = dout[n * F + f];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      want[n * 2 * F + f] = d * u * sig * (1.0 + g * (1.0 - sig));
      want[n * 2 * F + F + f] = d * Silu(g);
    }
  EXPECT_TRUE(AllClose(dgu, want, 1e-6));
  // With act: the same dgate_up, and act the forward's out, both to the bit.
  std::vector<float> dgu_act(N * 2 * F, -1.f), act(N * F, 3.f);
  ASSERT_TRUE(backend
                  .SwiGluBackward(View(dgu_act, {N, 2 * F}), View(dout, {N, F}),
                                  View(gu, {N, 2 * F}), View(act, {N, F}))
                  .ok());
  EXPECT_TRUE(BitwiseEqual(dgu_act, dgu));
  EXPECT_TRUE(BitwiseEqual(act, out));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuSwiGlu,
                         ::testing::Values(NormCase{1, 1}, NormCase{3, 5}, NormCase{7, 33},
                                           NormCase{4, 100}));

// ---- grouped-query attention ----

// Causal softmax(q k^T / sqrt(HS)) v, q head h with kv head h / (NH/NKV), over qkv
// (B,T,(NH+2*NKV)*HS); lse (B,NH,T) optional.
DoubleVec GqaReference(const DoubleVec& qkv, const HeadsCase& a, DoubleVec* lse = nullptr) {
  const int HS = a.HD, C = a.NH * HS, W = (a.NH + 2 * a.NKV) * HS, group = a.NH / a.NKV;
  DoubleVec out(static_cast<size_t>(a.B) * a.T * C, 0.0);
  if (lse) lse->assign(static_cast<size_t>(a.B) * a.NH * a.T, 0.0);
  auto q = [&](int b, int t, int h, int i) { return qkv[(b * a.T + t) * W + h * HS + i]; };
  auto k = [&](int b, int t, int h, int i) {
    return qkv[(b * a.T + t) * W + C + (h / group) * HS + i];
  };
  auto v = [&](int b, int t, int h, int i) {
    return qkv[(b * a.T + t) * W + C + (a.NKV + h / group) * HS + i];
  };
  for (int b = 0; b < a.B; ++b)
    for (int h = 0; h < a.NH; ++h)
      for (int t = 0; t < a.T; ++t) {
        DoubleVec score(t + 1);
        double max_score = -INFINITY, sum = 0.0;
        for (int s = 0; s <= t; ++s) {
          double d = 0.0;
          for (int i = 0; i < HS; ++i) d += q(b, t, h, i) * k(b, s, h, i);
          score[s] = d / std::sqrt(static_cast<double>(HS));
          max_score = std::max(max_score, score[s]);
        }
        for (int s = 0; s <= t; ++s) sum += std::exp(score[s] - max_score);
        for (int s = 0; s <= t; ++s)
          for (int i = 0; i < HS; ++i)
            out[(b * a.T + t) * C + h * HS + i] +=
                std::exp(score[s] - max_score) / sum * v(b, s, h, i);
        if (lse) (*lse)[(b * a.NH + h) * a.T + t] = max_score + std::log(sum);
      }
  return out;
}

// The multi-head qkv (B,T,3*NH*HS) with each kv head repeated for its query heads.
std::vector<float> RepeatKv(const std::vector<float>& qkv, const HeadsCase& a) {
  const int HS = a.HD, C = a.NH * HS, W = (a.NH + 2 * a.NKV) * HS, group = a.NH / a.NKV;
  std::vector<float> mha(static_cast<size_t>(a.B) * a.T * 3 * C);
  for (int n = 0; n < a.B * a.T; ++n)
    for (int h = 0; h < a.NH; ++h)
      for (int i = 0; i < HS; ++i) {
        mha[n * 3 * C + h * HS + i] = qkv[n * W + h * HS + i];
        mha[n * 3 * C + C + h * HS + i] = qkv[n * W + C + (h / group) * HS + i];
        mha[n * 3 * C + 2 * C + h * HS + i] = qkv[n * W + C + (a.NKV + h / group) * HS + i];
      }
  return mha;
}

class CpuGqa : public ::testing::TestWithParam<HeadsCase> {};

TEST_P(CpuGqa, EqualsMultiHeadAttentionWithRepeatedKvHeads) {
  const HeadsCase a = GetParam();
  const int HS = a.HD, C = a.NH * HS, W = (a.NH + 2 * a.NKV) * HS, group = a.NH / a.NKV;
  CpuBackend backend;
  std::vector<float> qkv = RandomFloats(a.B * a.T * W, 51, -1.5f, 1.5f);
  std::vector<float> out(a.B * a.T * C, 7.f), stats(a.B * a.NH * a.T, 7.f);
  ASSERT_TRUE(backend
                  .AttentionForward(View(out, {a.B, a.T, C}), View(stats, {a.B, a.NH, a.T}),
                                    View(qkv, {a.B, a.T, W}), a.NH, a.NKV)
                  .ok());
  DoubleVec want_lse;
  EXPECT_TRUE(AllClose(out, GqaReference(ToDouble(qkv), a, &want_lse), 1e-5));
  EXPECT_TRUE(AllClose(stats, want_lse, 1e-5));

  std::vector<float> mha = RepeatKv(qkv, a), mout(out.size()), mstats(stats.size());
  ASSERT_TRUE(backend
                  .AttentionForward(View(mout, {a.B, a.T, C}), View(mstats, {a.B, a.NH, a.T}),
                                    View(mha, {a.B, a.T, 3 * C}), a.NH)
                  .ok());
  EXPECT_TRUE(AllClose(out, ToDouble(mout), 1e-6));
  EXPECT_TRUE(AllClose(stats, ToDouble(mstats), 1e-6));

  std::vector<float> dout = RandomFloats(out.size(), 52), dqkv(qkv.size(), 1e3f),
                     mdqkv(mha.size(), 1e3f);
  ASSERT_TRUE(backend
                  .AttentionBackward(View(dqkv, {a.B, a.T, W}), View(dout, {a.B, a.T, C}),
                                     View(qkv, {a.B, a.T, W}), View(out, {a.B, a.T, C}),
                                     View(stats, {a.B, a.NH, a.T}), a.NH, a.NKV)
                  .ok());
  ASSERT_TRUE(backend
                  .AttentionBackward(View(mdqkv, {a.B, a.T, 3 * C}), View(dout, {a.B, a.T, C}),
                                     View(mha, {a.B, a.T, 3 * C}), View(mout, {a.B, a.T, C}),
                                     View(mstats, {a.B, a.NH, a.T}), a.NH)
                  .ok());
  // dq equal; dk, dv of a kv head = the sums over its copies.
  DoubleVec want(dqkv.size(), 0.0);
  for (int n = 0; n < a.B * a.T; ++n)
    for (int h = 0; h < a.NH; ++h)
      for (int i = 0; i < HS; ++i) {
        want[n * W + h * HS + i] = mdqkv[n * 3 * C + h * HS + i];
        want[n * W + C + (h / group) * HS + i] += mdqkv[n * 3 * C + C + h * HS + i];
        want[n * W + C + (a.NKV + h / group) * HS + i] += mdqkv[n * 3 * C + 2 * C + h * HS + i];
      }
  EXPECT_TRUE(AllClose(dqkv, want, 1e-5));
}

TEST_P(CpuGqa, BackwardMatchesFiniteDifferences) {
  const HeadsCase a = GetParam();
  const int HS = a.HD, C = a.NH * HS, W = (a.NH + 2 * a.NKV) * HS;
  CpuBackend backend;
  std::vector<float> qkv = RandomFloats(a.B * a.T * W, 53, -1.5f, 1.5f);
  std::vector<float> out(a.B * a.T * C), stats(a.B * a.NH * a.T), dqkv(qkv.size(), 1e3f);
  const std::vector<float> dout = RandomFloats(out.size(), 54);
  std::vector<float> dout_copy = dout;
  ASSERT_TRUE(backend
                  .AttentionForward(View(out, {a.B, a.T, C}), View(stats, {a.B, a.NH, a.T}),
                                    View(qkv, {a.B, a.T, W}), a.NH, a.NKV)
                  .ok());
  ASSERT_TRUE(backend
                  .AttentionBackward(View(dqkv, {a.B, a.T, W}), View(dout_copy, {a.B, a.T, C}),
                                     View(qkv, {a.B, a.T, W}), View(out, {a.B, a.T, C}),
                                     View(stats, {a.B, a.NH, a.T}), a.NH, a.NKV)
                  .ok());
  EXPECT_TRUE(AllClose(dqkv,
                       NumericGradient([&](const DoubleVec& x) { return GqaReference(x, a); },
                                       ToDouble(qkv), ToDouble(dout)),
                       1e-4));
}

// HeadsCase's HD is the head size here.
INSTANTIATE_TEST_SUITE_P(Shapes, CpuGqa,
                         ::testing::Values(HeadsCase{1, 1, 2, 1, 4}, HeadsCase{1, 5, 4, 2, 3},
                                           HeadsCase{2, 7, 4, 2, 4}, HeadsCase{2, 9, 6, 3, 5},
                                           HeadsCase{1, 6, 3, 1, 2}, HeadsCase{1, 5, 3, 3, 8},
                                           HeadsCase{1, 67, 4, 1, 3}));  // 2 query blocks

// ---- determinism ----

// The backward ops (and the forwards they need) on shapes spanning several column chunks and
// threads' ranges; all outputs concatenated.
std::vector<float> RunBackwardOps(int threads) {
  omp_set_num_threads(threads);
  const int B = 2, T = 67, NH = 4, NKV = 2, HD = 16, W = (NH + 2 * NKV) * HD, N = B * T, C = 100,
            F = 70;
  CpuBackend backend;
  std::vector<float> result;
  auto keep = [&result](const std::vector<float>& v) {
    result.insert(result.end(), v.begin(), v.end());
  };
  std::vector<float> x = RandomFloats(N * C, 61), w = RandomFloats(C, 62), xo(N * C), rstd(N),
                     dx = RandomFloats(N * C, 63), dw(C), g = RandomFloats(N * C, 64);
  EXPECT_TRUE(
      backend.RmsNormForward(View(xo, {N, C}), View(rstd, {N}), View(x, {N, C}), View(w, {C}), kEps)
          .ok());
  EXPECT_TRUE(backend
                  .RmsNormBackward(View(dx, {N, C}), View(dw, {C}), View(g, {N, C}),
                                   View(x, {N, C}), View(w, {C}), View(rstd, {N}))
                  .ok());
  keep(xo), keep(rstd), keep(dx), keep(dw);

  std::vector<float> qkv = RandomFloats(N * W, 65), qw = RandomFloats(HD, 66),
                     kw = RandomFloats(HD, 67), normed(N * W), qk_rstd(N * (NH + NKV)), dqw(HD),
                     dkw(HD), dnormed(N * W);
  std::vector<float> table = RopeTable(T, HD);
  const Tensor cos_sin = View(table, {2, T, HD / 2});
  std::vector<float> att(N * NH * HD), stats(B * NH * T), datt = RandomFloats(N * NH * HD, 68),
                                                          dqkv(N * W);
  EXPECT_TRUE(backend
                  .QkNormForward(View(normed, {B, T, W}), View(qk_rstd, {N, NH + NKV}),
                                 View(qkv, {B, T, W}), View(qw, {HD}), View(kw, {HD}), NH, NKV,
                                 kEps)
                  .ok());
  EXPECT_TRUE(backend.RopeForward(View(normed, {B, T, W}), cos_sin, NH, NKV).ok());
  EXPECT_TRUE(backend
                  .AttentionForward(View(att, {B, T, NH * HD}), View(stats, {B, NH, T}),
                                    View(normed, {B, T, W}), NH, NKV)
                  .ok());
  EXPECT_TRUE(backend
                  .AttentionBackward(View(dqkv, {B, T, W}), View(datt, {B, T, NH * HD}),
                                     View(normed, {B, T, W}), View(att, {B, T, NH * HD}),
                                     View(stats, {B, NH, T}), NH, NKV)
                  .ok());
  EXPECT_TRUE(backend.RopeBackward(View(dqkv, {B, T, W}), cos_sin, NH, NKV).ok());
  EXPECT_TRUE(backend
                  .QkNormBackward(View(dnormed, {B, T, W}), View(dqw, {HD}), View(dkw, {HD}),
                                  View(dqkv, {B, T, W}), View(qkv, {B, T, W}), View(qw, {HD}),
                                  View(kw, {HD}), View(qk_rstd, {N, NH + NKV}), NH, NKV)
                  .ok());
  keep(normed), keep(att), keep(stats), keep(dqkv), keep(dnormed), keep(dqw), keep(dkw);

  std::vector<float> gu = RandomFloats(N * 2 * F, 69, -4.f, 4.f), act(N * F),
                     dact = RandomFloats(N * F, 70), dgu(N * 2 * F);
  EXPECT_TRUE(backend.SwiGluForward(View(act, {N, F}), View(gu, {N, 2 * F})).ok());
  EXPECT_TRUE(
      backend.SwiGluBackward(View(dgu, {N, 2 * F}), View(dact, {N, F}), View(gu, {N, 2 * F})).ok());
  keep(act), keep(dgu);
  return result;
}

TEST(CpuLlamaDeterminism, BitIdenticalForOneAndFourThreads) {
  const int saved = omp_get_max_threads();
  const std::vector<float> one = RunBackwardOps(1);
  const std::vector<float> four = RunBackwardOps(4);
  const std::vector<float> again = RunBackwardOps(4);
  omp_set_num_threads(saved);
  for (float f : one) ASSERT_TRUE(std::isfinite(f));
  EXPECT_TRUE(BitwiseEqual(one, four));
  EXPECT_TRUE(BitwiseEqual(four, again));
}

// ---- contracts ----

// Each op refuses a bad shape with a Status naming it (and runs nothing).
TEST(CpuLlamaContracts, BadShapesAreRejected) {
  CpuBackend backend;
  const int N = 4, C = 8, NH = 4, NKV = 2, HD = 4, W = (NH + 2 * NKV) * HD;
  std::vector<float> x(N * C), out(N * C), rstd(N), w(C + 1), dw(C), wc(C), dwbad(C - 1);
  auto rejects = [](const Status& s, const char* op) {
    return !s.ok() && s.message().find(op) != std::string::npos;
  };
  EXPECT_TRUE(rejects(backend.RmsNormForward(View(out, {N, C}), View(rstd, {N}), View(x, {N, C}),
                                             View(w, {C + 1}), kEps),
                      "RmsNormForward"));
  EXPECT_TRUE(rejects(backend.RmsNormForward(View(out, {N, C}), View(rstd, {N}), View(x, {N, C}),
                                             View(wc, {C}), 0.f),
                      "RmsNormForward"));
  EXPECT_TRUE(
      rejects(backend.RmsNormBackward(View(out, {N, C}), View(dwbad, {C - 1}), View(x, {N, C}),
                                      View(x, {N, C}), View(wc, {C}), View(rstd, {N})),
              "RmsNormBackward"));
  std::vector<float> shortb(N * C - 1);
  EXPECT_TRUE(rejects(
      backend.AddRmsNormForward(View(x, {N, C}), View(out, {N, C}), View(rstd, {N}),
                                View(x, {N, C}), View(shortb, {N * C - 1}), View(wc, {C}), kEps),
      "AddRmsNormForward"));

  std::vector<float> qkv(N * W), qkv_out(N * W), qk_rstd(N * (NH + NKV)), hw(HD), dhw(HD),
      hw_bad(HD + 1);
  EXPECT_TRUE(rejects(backend.QkNormForward(View(qkv_out, {1, N, W}), View(qk_rstd, {N, NH + NKV}),
                                            View(qkv, {1, N, W}), View(hw_bad, {HD + 1}),
                                            View(hw, {HD}), NH, NKV, kEps),
                      "QkNormForward"));
  EXPECT_TRUE(rejects(backend.QkNormForward(View(qkv_out, {1, N, W}), View(qk_rstd, {N, NH + NKV}),
                                            View(qkv, {1, N, W}), View(hw, {HD}), View(hw, {HD}), 3,
                                            2, kEps),  // 3 heads do not group by 2
                      "QkNormForward"));
  EXPECT_TRUE(
      rejects(backend.QkNormBackward(View(qkv, {1, N, W}), View(dhw, {HD}), View(dhw, {HD}),
                                     View(qkv, {1, N, W}), View(qkv, {1, N, W}), View(hw, {HD}),
                                     View(hw_bad, {HD + 1}), View(qk_rstd, {N, NH + NKV}), NH, NKV),
              "QkNormBackward"));

  std::vector<float> table = RopeTable(N - 1, HD), table_wide = RopeTable(N, 2 * HD);
  EXPECT_TRUE(rejects(
      backend.RopeForward(View(qkv, {1, N, W}), View(table, {2, N - 1, HD / 2}), NH, NKV),  // P < T
      "RopeForward"));
  EXPECT_TRUE(
      rejects(backend.RopeBackward(View(qkv, {1, N, W}), View(table_wide, {2, N, HD}), NH, NKV),
              "RopeBackward"));
  std::vector<float> odd(N * 9), odd_table = RopeTable(N, 2);  // 3 heads of 3 values
  EXPECT_TRUE(rejects(backend.RopeForward(View(odd, {1, N, 9}), View(odd_table, {2, N, 1}), 1, 1),
                      "RopeForward"));

  std::vector<float> gu(N * 7), act(N * 3), dact(N * 4), gu8(N * 8);
  EXPECT_TRUE(rejects(backend.SwiGluForward(View(act, {N, 3}), View(gu, {N, 7})), "SwiGluForward"));
  EXPECT_TRUE(
      rejects(backend.SwiGluBackward(View(gu8, {N, 8}), View(dact, {N, 4}), View(gu8, {N, 8})),
              "SwiGluBackward"));  // dgate_up aliases gate_up
  std::vector<float> dgu8(N * 8), act4(N * 4), act3(N * 3);
  EXPECT_TRUE(rejects(backend.SwiGluBackward(View(dgu8, {N, 8}), View(dact, {N, 4}),
                                             View(gu8, {N, 8}), View(dact, {N, 4})),
                      "SwiGluBackward"));  // act aliases dout
  EXPECT_TRUE(rejects(backend.SwiGluBackward(View(dgu8, {N, 8}), View(dact, {N, 4}),
                                             View(gu8, {N, 8}), View(act3, {N, 3})),
                      "SwiGluBackward"));  // act is not (N, F)
  EXPECT_TRUE(backend
                  .SwiGluBackward(View(dgu8, {N, 8}), View(dact, {N, 4}), View(gu8, {N, 8}),
                                  View(act4, {N, 4}))
                  .ok());

  // Attention: 4 query heads do not group into 3 kv heads.
  std::vector<float> att(N * NH * HD), stats(NH * N);
  EXPECT_TRUE(rejects(backend.AttentionForward(View(att, {1, N, NH * HD}), View(stats, {1, NH, N}),
                                               View(qkv, {1, N, W}), NH, 3),
                      "AttentionForward"));
  EXPECT_TRUE(
      rejects(backend.AttentionBackward(View(qkv_out, {1, N, W}), View(att, {1, N, NH * HD}),
                                        View(qkv, {1, N, W}), View(att, {1, N, NH * HD}),
                                        View(stats, {1, NH, N}), NH, NH),  // W is not 3C
              "AttentionBackward"));
}

}  // namespace
}  // namespace trainer
