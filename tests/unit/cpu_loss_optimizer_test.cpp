// CpuBackend tests, part 3: vocabulary-parallel cross-entropy (two simulated ranks reduced by
// hand, padding columns), AdamW against the closed form, SumInto against double loops, and
// determinism: bit-identical results on repeated calls and for 1, 2 or 3 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <ostream>
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
using testing::RandomInts;
using testing::ToDouble;
using testing::View;

// ---- cross-entropy ----

struct CrossEntropyCase {
  int N, vocab_size, padded_vocab;
};
std::ostream& operator<<(std::ostream& os, const CrossEntropyCase& e) {
  return os << "N=" << e.N << " vocab_size=" << e.vocab_size << " padded=" << e.padded_vocab;
}

// losses (N) over the real columns (< vocab_size) of logits (N, padded_vocab).
DoubleVec CrossEntropyReference(const DoubleVec& logits, const std::vector<int32_t>& targets,
                                const CrossEntropyCase& e) {
  DoubleVec losses(e.N);
  for (int n = 0; n < e.N; ++n) {
    const double* x = logits.data() + static_cast<size_t>(n) * e.padded_vocab;
    double max_logit = -INFINITY, sum = 0.0;
    for (int j = 0; j < e.vocab_size; ++j) max_logit = std::max(max_logit, x[j]);
    for (int j = 0; j < e.vocab_size; ++j) sum += std::exp(x[j] - max_logit);
    losses[n] = std::log(sum) + max_logit - x[targets[n]];
  }
  return losses;
}

// Columns [begin, begin + width) of an (N, V) matrix.
std::vector<float> Columns(const std::vector<float>& m, int N, int V, int begin, int width) {
  std::vector<float> out(static_cast<size_t>(N) * width);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < width; ++j) out[n * width + j] = m[n * V + begin + j];
  return out;
}

class CpuCrossEntropy : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CpuCrossEntropy, TwoRankSplitMatchesUnsplitLossAndFiniteDifferences) {
  const CrossEntropyCase e = GetParam();
  const int N = e.N, V = e.padded_vocab, ranks = 2, Vl = V / ranks;
  const float dloss_scale = 0.37f;
  CpuBackend backend;
  std::vector<float> logits = RandomFloats(N * V, 81, -3.f, 3.f);
  for (int n = 0; n < N; ++n)  // padding columns hold values that would dominate if not masked
    for (int j = e.vocab_size; j < V; ++j) logits[n * V + j] = 50.f;
  std::vector<int32_t> targets = RandomInts(N, 82, 0, e.vocab_size - 1);
  targets[0] = 0;
  targets[N - 1] = e.vocab_size - 1;

  // Pass 1 on each rank, max-reduce by hand.
  std::vector<std::vector<float>> local(ranks);
  std::vector<float> row_max(N, -INFINITY);
  for (int r = 0; r < ranks; ++r) {
    local[r] = Columns(logits, N, V, r * Vl, Vl);
    std::vector<float> rank_max(N);
    ASSERT_TRUE(
        backend
            .CrossEntropyRowMax(View(rank_max, {N}), View(local[r], {N, Vl}), r * Vl, e.vocab_size)
            .ok());
    for (int n = 0; n < N; ++n) {
      if (r * Vl >= e.vocab_size) {
        EXPECT_EQ(rank_max[n], -std::numeric_limits<float>::infinity());
      }
      row_max[n] = std::max(row_max[n], rank_max[n]);
    }
  }
  // Pass 2 on each rank, sum-reduce by hand.
  std::vector<float> sums(2 * N, 0.f);
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> rank_sums(2 * N, -1.f);
    ASSERT_TRUE(backend
                    .CrossEntropySums(View(rank_sums, {2, N}), View(local[r], {N, Vl}),
                                      View(row_max, {N}), View(targets, {N}), r * Vl, e.vocab_size)
                    .ok());
    for (int i = 0; i < 2 * N; ++i) {
      ASSERT_FALSE(std::isnan(rank_sums[i])) << "rank " << r << " element " << i;
      sums[i] += rank_sums[i];
    }
  }
  // Pass 3 on each rank, dlogits in place over the logits.
  std::vector<float> losses(N), dlogits(N * V);
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> rank_losses(N);
    ASSERT_TRUE(backend
                    .CrossEntropyBackward(View(rank_losses, {N}), View(local[r], {N, Vl}),
                                          View(local[r], {N, Vl}), View(row_max, {N}),
                                          View(sums, {2, N}), View(targets, {N}), r * Vl,
                                          e.vocab_size, dloss_scale)
                    .ok());
    if (r > 0) {
      EXPECT_EQ(rank_losses, losses);  // every rank computes the same losses
    }
    losses = rank_losses;
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < Vl; ++j) dlogits[n * V + r * Vl + j] = local[r][n * Vl + j];
  }
  const DoubleVec logits_d = ToDouble(logits);
  const DoubleVec want_losses = CrossEntropyReference(logits_d, targets, e);
  EXPECT_TRUE(AllClose(losses, want_losses, 1e-6));

  // One rank holding the whole vocabulary gives the same losses and gradients.
  std::vector<float> whole = logits, whole_max(N), whole_sums(2 * N), whole_losses(N);
  ASSERT_TRUE(
      backend.CrossEntropyRowMax(View(whole_max, {N}), View(whole, {N, V}), 0, e.vocab_size).ok());
  ASSERT_TRUE(backend
                  .CrossEntropySums(View(whole_sums, {2, N}), View(whole, {N, V}),
                                    View(whole_max, {N}), View(targets, {N}), 0, e.vocab_size)
                  .ok());
  ASSERT_TRUE(backend
                  .CrossEntropyBackward(View(whole_losses, {N}), View(whole, {N, V}),
                                        View(whole, {N, V}), View(whole_max, {N}),
                                        View(whole_sums, {2, N}), View(targets, {N}), 0,
                                        e.vocab_size, dloss_scale)
                  .ok());
  EXPECT_TRUE(AllClose(losses, ToDouble(whole_losses), 1e-6));
  EXPECT_TRUE(AllClose(dlogits, ToDouble(whole), 1e-6));

  // Gradients: finite differences of dloss_scale * sum(losses); exactly zero on padding.
  const DoubleVec want_dlogits =
      NumericGradient([&](const DoubleVec& x) { return CrossEntropyReference(x, targets, e); },
                      logits_d, DoubleVec(N, dloss_scale));
  EXPECT_TRUE(AllClose(dlogits, want_dlogits, 1e-5));
  for (int n = 0; n < N; ++n)
    for (int j = e.vocab_size; j < V; ++j) ASSERT_EQ(dlogits[n * V + j], 0.f) << n << "," << j;

  // Losses only when dlogits is empty.
  std::vector<float> only_losses(N);
  ASSERT_TRUE(backend
                  .CrossEntropyBackward(View(only_losses, {N}), Tensor(), View(logits, {N, V}),
                                        View(whole_max, {N}), View(whole_sums, {2, N}),
                                        View(targets, {N}), 0, e.vocab_size, dloss_scale)
                  .ok());
  EXPECT_EQ(only_losses, whole_losses);
}

// Targets < 0 (loss mask 0) give loss 0 and a zero gradient row; the other rows are those of the
// closed form, bit for bit those of the same rows with every target kept; on a rank split too.
TEST(CpuCrossEntropyIgnored, NegativeTargetsGiveNoLossAndNoGradient) {
  const CrossEntropyCase e{6, 19, 24};
  const int N = e.N, V = e.padded_vocab;
  const float dloss_scale = 0.25f;
  CpuBackend backend;
  const std::vector<float> logits = RandomFloats(N * V, 91, -3.f, 3.f);
  std::vector<int32_t> all = RandomInts(N, 92, 0, e.vocab_size - 1);
  std::vector<int32_t> some = all;
  some[1] = -1;
  some[4] = -1;
  auto fused = [&](std::vector<int32_t> targets, std::vector<float>* losses,
                   std::vector<float>* dlogits) {
    *dlogits = logits;
    losses->assign(N, -1.f);
    std::vector<float> row_max(N), sums(2 * N);
    ASSERT_TRUE(backend
                    .CrossEntropyFused(View(*losses, {N}), View(*dlogits, {N, V}),
                                       View(*dlogits, {N, V}), View(row_max, {N}),
                                       View(sums, {2, N}), View(targets, {N}), e.vocab_size,
                                       dloss_scale)
                    .ok());
  };
  std::vector<float> losses_all, d_all, losses, d;
  fused(all, &losses_all, &d_all);
  fused(some, &losses, &d);
  const DoubleVec want = CrossEntropyReference(ToDouble(logits), all, e);
  for (int n = 0; n < N; ++n) {
    if (some[n] < 0) {
      EXPECT_EQ(losses[n], 0.f) << n;
      for (int j = 0; j < V; ++j) ASSERT_EQ(d[n * V + j], 0.f) << n << "," << j;
    } else {
      EXPECT_NEAR(losses[n], want[n], 1e-5) << n;
      EXPECT_EQ(losses[n], losses_all[n]) << n;
      for (int j = 0; j < V; ++j) ASSERT_EQ(d[n * V + j], d_all[n * V + j]) << n << "," << j;
    }
  }
  // The second of two vocabulary ranks: the ignored rows are zero there as well.
  const int Vl = V / 2;
  std::vector<float> local = Columns(logits, N, V, Vl, Vl), row_max(N), sums(2 * N);
  std::vector<float> rank_losses(N, -1.f);
  ASSERT_TRUE(
      backend.CrossEntropyRowMax(View(row_max, {N}), View(local, {N, Vl}), Vl, e.vocab_size).ok());
  ASSERT_TRUE(backend
                  .CrossEntropySums(View(sums, {2, N}), View(local, {N, Vl}), View(row_max, {N}),
                                    View(some, {N}), Vl, e.vocab_size)
                  .ok());
  ASSERT_TRUE(backend
                  .CrossEntropyBackward(View(rank_losses, {N}), View(local, {N, Vl}),
                                        View(local, {N, Vl}), View(row_max, {N}),
                                        View(sums, {2, N}), View(some, {N}), Vl, e.vocab_size,
                                        dloss_scale)
                  .ok());
  for (int n : {1, 4}) {
    EXPECT_EQ(rank_losses[n], 0.f);
    for (int j = 0; j < Vl; ++j) ASSERT_EQ(local[n * Vl + j], 0.f) << n << "," << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, CpuCrossEntropy,
                         ::testing::Values(CrossEntropyCase{6, 19, 24},    // rank 1 part padding
                                           CrossEntropyCase{5, 11, 24},    // rank 1 all padding
                                           CrossEntropyCase{4, 32, 32}));  // no padding

// ---- AdamW ----

TEST(CpuAdamW, FirstStepMatchesClosedForm) {
  // From zero moments, step 1: m_hat = g and v_hat = g^2, so
  // w1 = w0 - lr * (g / (|g| + eps) + wd * w0), with g = grad * grad_scale.
  const size_t n = 257;
  CpuBackend backend;
  std::vector<float> master = RandomFloats(n, 91), grad = RandomFloats(n, 92), m(n, 0.f), v(n, 0.f),
                     param(n, 0.f);
  const std::vector<float> w0 = master;
  AdamWParams p;
  p.lr = 0.01f;
  p.weight_decay = 0.1f;
  p.eps = 1e-8f;
  p.step = 1;
  p.grad_scale = 0.5f;
  ASSERT_TRUE(backend
                  .AdamW(View(param, {n}), View(master, {n}), View(grad, {n}), View(m, {n}),
                         View(v, {n}), p)
                  .ok());
  DoubleVec want_w(n), want_m(n), want_v(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(grad[i]) * p.grad_scale;
    want_w[i] = w0[i] - p.lr * (g / (std::abs(g) + p.eps) + p.weight_decay * w0[i]);
    want_m[i] = (1 - p.beta1) * g;
    want_v[i] = (1 - p.beta2) * g * g;
  }
  EXPECT_TRUE(AllClose(master, want_w, 1e-6));
  EXPECT_EQ(param, master);
  EXPECT_TRUE(AllClose(m, want_m, 1e-6));
  EXPECT_TRUE(AllClose(v, want_v, 1e-6));
}

TEST(CpuAdamW, LaterStepWithMomentsMatchesFormulaAndParamMayAliasMaster) {
  const size_t n = 100;
  CpuBackend backend;
  std::vector<float> master = RandomFloats(n, 93), grad = RandomFloats(n, 94),
                     m = RandomFloats(n, 95, -0.1f, 0.1f), v = RandomFloats(n, 96, 0.f, 0.01f);
  const std::vector<float> w0 = master, m0 = m, v0 = v;
  AdamWParams p;
  p.lr = 3e-3f;
  p.beta1 = 0.8f;
  p.beta2 = 0.99f;
  p.eps = 1e-6f;
  p.weight_decay = 0.05f;
  p.step = 7;
  ASSERT_TRUE(backend
                  .AdamW(View(master, {n}), View(master, {n}), View(grad, {n}), View(m, {n}),
                         View(v, {n}), p)
                  .ok());
  DoubleVec want(n);
  for (size_t i = 0; i < n; ++i) {
    const double g = grad[i];
    const double mi = p.beta1 * m0[i] + (1 - p.beta1) * g;
    const double vi = p.beta2 * v0[i] + (1 - p.beta2) * g * g;
    const double m_hat = mi / (1 - std::pow(double{p.beta1}, p.step));
    const double v_hat = vi / (1 - std::pow(double{p.beta2}, p.step));
    want[i] = w0[i] - p.lr * (m_hat / (std::sqrt(v_hat) + p.eps) + p.weight_decay * w0[i]);
  }
  EXPECT_TRUE(AllClose(master, want, 1e-6));
}

// With grad_sum_squares given, the scale comes from it: max_norm / (norm + 1e-6) above max_norm,
// 1 within it; the result is that of the same step with that grad_scale.
TEST(CpuAdamW, ClipScaleFromSumOfSquares) {
  const size_t n = 37;
  for (const double sum_squares : {16.0, 0.25}) {  // norm 4 (clipped to 1), norm 0.5 (kept)
    CpuBackend backend;
    std::vector<float> a = RandomFloats(n, 97), grad = RandomFloats(n, 98);
    std::vector<float> b = a, ma(n, 0.f), va(n, 0.f), mb(n, 0.f), vb(n, 0.f);
    AdamWParams p;
    p.lr = 1e-2f;
    p.grad_scale = 123.f;  // ignored: the sum of squares decides
    p.grad_sum_squares = &sum_squares;
    p.max_grad_norm = 1.0;
    ASSERT_TRUE(
        backend.AdamW(View(a, {n}), View(a, {n}), View(grad, {n}), View(ma, {n}), View(va, {n}), p)
            .ok());
    AdamWParams q;
    q.lr = p.lr;
    q.grad_scale = sum_squares > 1 ? static_cast<float>(1.0 / (4.0 + 1e-6)) : 1.f;
    ASSERT_TRUE(
        backend.AdamW(View(b, {n}), View(b, {n}), View(grad, {n}), View(mb, {n}), View(vb, {n}), q)
            .ok());
    EXPECT_EQ(a, b) << sum_squares;
    EXPECT_EQ(ma, mb) << sum_squares;
  }
}

// ---- SumInto ----

TEST(CpuSumInto, SquaresMatchDoubleLoop) {
  CpuBackend backend;
  double got = -1.0;
  const Tensor total(&got, DType::kF64, {1});
  for (size_t n : {size_t{1}, size_t{63}, size_t{100003}}) {
    std::vector<float> x = RandomFloats(n, 101, -3.f, 3.f);
    double want = 0.0;
    for (float f : x) want += static_cast<double>(f) * f;
    ASSERT_TRUE(
        backend.SumInto(total, View(x, {static_cast<int64_t>(n)}), SumOf::kSquares, false).ok());
    EXPECT_NEAR(got, want, want * 1e-11) << n;  // float accumulation would be ~1e-7
  }
  ASSERT_TRUE(backend.SumInto(total, Tensor(), SumOf::kSquares, false).ok());
  EXPECT_EQ(got, 0.0);
}

TEST(CpuSumInto, SetsThenAccumulates) {
  CpuBackend backend;
  std::vector<float> a = RandomFloats(1001, 7, -3.f, 3.f), b = RandomFloats(17, 8, -3.f, 3.f);
  double want_a = 0.0, want_b = 0.0;
  for (float f : a) want_a += f;
  for (float f : b) want_b += f;
  double total = 12345.0;  // overwritten by the first call
  const Tensor t(&total, DType::kF64, {1});
  ASSERT_TRUE(backend.SumInto(t, View(a, {1001}), SumOf::kValues, false).ok());
  EXPECT_NEAR(total, want_a, 1e-9);
  ASSERT_TRUE(backend.SumInto(t, View(b, {17}), SumOf::kValues, true).ok());
  EXPECT_NEAR(total, want_a + want_b, 1e-9);
  double squares = 0.0;
  for (float f : b) squares += static_cast<double>(f) * f;
  ASSERT_TRUE(backend.SumInto(t, View(b, {17}), SumOf::kSquares, true).ok());
  EXPECT_NEAR(total, want_a + want_b + squares, 1e-9);
  // total must be one f64
  EXPECT_FALSE(backend.SumInto(View(a, {1001}), View(b, {17}), SumOf::kValues, true).ok());
}

// ---- determinism ----

// Every op of a training step on shapes that span several blocks and threads' ranges; returns
// all outputs concatenated.
std::vector<float> RunAllOps(int threads) {
  omp_set_num_threads(threads);
  const int B = 2, T = 67, NH = 3, HS = 16, C = NH * HS, N = B * T, F = 4 * C, V = 300;
  CpuBackend backend;
  std::vector<float> result;
  auto keep = [&result](const std::vector<float>& v) {
    result.insert(result.end(), v.begin(), v.end());
  };
  std::vector<int32_t> tokens = RandomInts(N, 111, 0, V - 1), targets = RandomInts(N, 112, 0, 250);
  std::vector<float> wte = RandomFloats(V * C, 113), wpe = RandomFloats(T * C, 114);
  std::vector<float> x(N * C), ln(N * C), mean(N), rstd(N), lnw = RandomFloats(C, 115),
                                                            lnb = RandomFloats(C, 116);
  EXPECT_TRUE(backend
                  .EmbeddingForward(View(x, {B, T, C}), View(tokens, {B, T}), View(wte, {V, C}),
                                    View(wpe, {T, C}), 0)
                  .ok());
  EXPECT_TRUE(backend
                  .LayerNormForward(View(ln, {N, C}), View(mean, {N}), View(rstd, {N}),
                                    View(x, {N, C}), View(lnw, {C}), View(lnb, {C}))
                  .ok());
  std::vector<float> wqkv = RandomFloats(3 * C * C, 117, -0.2f, 0.2f),
                     bqkv = RandomFloats(3 * C, 118);
  std::vector<float> qkv(N * 3 * C), att(N * C), stats(B * NH * T);
  EXPECT_TRUE(backend
                  .MatmulForward(View(qkv, {B, T, 3 * C}), Tensor(), View(ln, {N, C}),
                                 View(wqkv, {3 * C, C}), View(bqkv, {3 * C}), Activation::kNone)
                  .ok());
  EXPECT_TRUE(backend
                  .AttentionForward(View(att, {B, T, C}), View(stats, {B, NH, T}),
                                    View(qkv, {B, T, 3 * C}), NH)
                  .ok());
  std::vector<float> wfc = RandomFloats(F * C, 119, -0.2f, 0.2f), pre(N * F), fc(N * F);
  EXPECT_TRUE(backend
                  .MatmulForward(View(fc, {N, F}), View(pre, {N, F}), View(att, {N, C}),
                                 View(wfc, {F, C}), Tensor(), Activation::kGelu)
                  .ok());
  std::vector<float> logits(N * V), row_max(N), sums(2 * N), losses(N);
  EXPECT_TRUE(backend
                  .MatmulForward(View(logits, {N, V}), Tensor(), View(ln, {N, C}),
                                 View(wte, {V, C}), Tensor(), Activation::kNone)
                  .ok());
  EXPECT_TRUE(backend.CrossEntropyRowMax(View(row_max, {N}), View(logits, {N, V}), 0, 257).ok());
  EXPECT_TRUE(backend
                  .CrossEntropySums(View(sums, {2, N}), View(logits, {N, V}), View(row_max, {N}),
                                    View(targets, {N}), 0, 257)
                  .ok());
  EXPECT_TRUE(backend
                  .CrossEntropyBackward(View(losses, {N}), View(logits, {N, V}),
                                        View(logits, {N, V}), View(row_max, {N}),
                                        View(sums, {2, N}), View(targets, {N}), 0, 257, 0.1f)
                  .ok());
  keep(x), keep(ln), keep(qkv), keep(att), keep(stats), keep(fc), keep(losses), keep(logits);
  // Backward.
  std::vector<float> dwte(V * C), dwpe(T * C), dln(N * C), dx(N * C), dwqkv(3 * C * C),
      dbqkv(3 * C), dqkv(N * 3 * C), datt(N * C), dfc = RandomFloats(N * F, 120), dwfc(F * C),
                                                  dlnw(C), dlnb(C);
  EXPECT_TRUE(backend
                  .MatmulBackward(View(dln, {N, C}), View(dwte, {V, C}), Tensor(),
                                  View(logits, {N, V}), View(ln, {N, C}), View(wte, {V, C}),
                                  GradientWrite::kAccumulate)
                  .ok());
  EXPECT_TRUE(backend.GeluBackward(View(dfc, {N, F}), View(dfc, {N, F}), View(pre, {N, F})).ok());
  EXPECT_TRUE(backend
                  .MatmulBackward(View(datt, {N, C}), View(dwfc, {F, C}), Tensor(),
                                  View(dfc, {N, F}), View(att, {N, C}), View(wfc, {F, C}),
                                  GradientWrite::kAccumulate)
                  .ok());
  EXPECT_TRUE(backend
                  .AttentionBackward(View(dqkv, {B, T, 3 * C}), View(datt, {B, T, C}),
                                     View(qkv, {B, T, 3 * C}), View(att, {B, T, C}),
                                     View(stats, {B, NH, T}), NH)
                  .ok());
  EXPECT_TRUE(backend
                  .MatmulBackward(View(dln, {N, C}), View(dwqkv, {3 * C, C}), View(dbqkv, {3 * C}),
                                  View(dqkv, {N, 3 * C}), View(ln, {N, C}), View(wqkv, {3 * C, C}),
                                  GradientWrite::kAccumulate)
                  .ok());
  EXPECT_TRUE(backend
                  .LayerNormBackward(View(dx, {N, C}), View(dlnw, {C}), View(dlnb, {C}), Tensor(),
                                     View(dln, {N, C}), View(x, {N, C}), View(lnw, {C}),
                                     View(mean, {N}), View(rstd, {N}))
                  .ok());
  EXPECT_TRUE(backend
                  .EmbeddingBackward(View(dwte, {V, C}), View(dwpe, {T, C}), View(dx, {B, T, C}),
                                     View(tokens, {B, T}), 0)
                  .ok());
  std::vector<float> m(wte.size()), v(wte.size()), param(wte.size());
  AdamWParams p;
  p.lr = 1e-3f;
  p.weight_decay = 0.1f;
  EXPECT_TRUE(backend
                  .AdamW(View(param, {V, C}), View(wte, {V, C}), View(dwte, {V, C}),
                         View(m, {V, C}), View(v, {V, C}), p)
                  .ok());
  double norm = 0.0;
  EXPECT_TRUE(
      backend
          .SumInto(Tensor(&norm, DType::kF64, {1}), View(dwqkv, {3 * C, C}), SumOf::kSquares, false)
          .ok());
  keep(dwte), keep(dwpe), keep(dx), keep(dwqkv), keep(dbqkv), keep(dqkv), keep(dwfc), keep(dlnw);
  keep(dlnb), keep(param), keep(m), keep(v);
  result.push_back(static_cast<float>(norm));
  result.push_back(static_cast<float>(norm - static_cast<float>(norm)));
  return result;
}

TEST(CpuDeterminism, BitIdenticalAcrossCallsAndThreadCounts) {
  const int saved = omp_get_max_threads();
  const std::vector<float> one = RunAllOps(1);
  const std::vector<float> again = RunAllOps(1);
  const std::vector<float> two = RunAllOps(2);
  const std::vector<float> three = RunAllOps(3);
  omp_set_num_threads(saved);
  for (float f : one) ASSERT_TRUE(std::isfinite(f));
  EXPECT_TRUE(BitwiseEqual(one, again));
  EXPECT_TRUE(BitwiseEqual(one, two));
  EXPECT_TRUE(BitwiseEqual(one, three));
}

}  // namespace
}  // namespace trainer
