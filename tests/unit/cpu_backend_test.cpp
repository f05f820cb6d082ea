// CpuBackend tests, part 1: memory and elementwise ops, embedding, LayerNorm, shape errors. Each
// forward is compared with a naive double-precision loop written here; each backward with central
// finite differences of that loop.
#include "model/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "cpu_test_util.h"

namespace trainer {
namespace {

using testing::AllClose;
using testing::DoubleVec;
using testing::NumericGradient;
using testing::RandomFloats;
using testing::RandomInts;
using testing::ToDouble;
using testing::View;

// ---- memory and elementwise ----

TEST(CpuBackendMemory, AllocateIsAlignedAndZeroed) {
  CpuBackend backend;
  EXPECT_EQ(backend.compute_dtype(), DType::kF32);
  EXPECT_FALSE(backend.device_memory());
  for (size_t bytes : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    void* p = nullptr;
    ASSERT_TRUE(backend.Allocate(bytes, &p).ok());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
    const unsigned char* bytes_ptr = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(bytes_ptr[i], 0) << "byte " << i;
    backend.Free(p);
  }
}

TEST(CpuBackendMemory, CopiesZeroAndConvert) {
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  ASSERT_EQ(backend->name(), "cpu");
  std::vector<float> src = RandomFloats(33, 1), dst(33, 7.f), back(33);
  ASSERT_TRUE(backend->CopyToDevice(dst.data(), src.data(), 33 * sizeof(float)).ok());
  EXPECT_EQ(dst, src);
  ASSERT_TRUE(backend->Zero(View(dst, {3, 11})).ok());
  for (float x : dst) EXPECT_EQ(x, 0.f);
  // f32 -> bf16 -> f32 rounds to 8 significant bits.
  std::vector<uint16_t> half(33);
  Tensor half_t(half.data(), DType::kBF16, {33});
  ASSERT_TRUE(backend->Convert(half_t, View(src, {33})).ok());
  ASSERT_TRUE(backend->Convert(View(back, {33}), half_t).ok());
  for (size_t i = 0; i < src.size(); ++i)
    EXPECT_NEAR(back[i], src[i], std::abs(src[i]) * (1.0 / 256)) << i;
  // f32 -> f32 is a copy.
  ASSERT_TRUE(backend->Convert(View(dst, {33}), View(src, {33})).ok());
  EXPECT_EQ(dst, src);
}

TEST(CpuBackendElementwise, AddAddInPlaceScale) {
  CpuBackend backend;
  const size_t n = 1003;
  std::vector<float> a = RandomFloats(n, 2), b = RandomFloats(n, 3), out(n);
  ASSERT_TRUE(backend.Add(View(out, {17, 59}), View(a, {17, 59}), View(b, {1003 / 59, 59})).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
  std::vector<float> alias = a;  // out aliasing a
  ASSERT_TRUE(backend.Add(View(alias, {n}), View(alias, {n}), View(b, {n})).ok());
  EXPECT_EQ(alias, out);
  std::vector<float> acc = a;
  ASSERT_TRUE(backend.AddInPlace(View(acc, {n}), View(b, {n})).ok());
  EXPECT_EQ(acc, out);
  ASSERT_TRUE(backend.Scale(View(acc, {n}), -0.5f).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], out[i] * -0.5f);
}

// ---- embedding ----

struct EmbeddingCase {
  int B, T, C, V, vocab_start, max_t;
  bool with_wpe;
};
std::ostream& operator<<(std::ostream& os, const EmbeddingCase& e) {
  return os << "B=" << e.B << " T=" << e.T << " C=" << e.C << " V=" << e.V
            << " vocab_start=" << e.vocab_start << " wpe=" << e.with_wpe;
}

// out[b,t] = wte[token - vocab_start] when in range, plus wpe[t].
DoubleVec EmbeddingReference(const std::vector<int32_t>& tokens, const DoubleVec& wte,
                             const DoubleVec& wpe, const EmbeddingCase& e) {
  DoubleVec out(static_cast<size_t>(e.B) * e.T * e.C, 0.0);
  for (int b = 0; b < e.B; ++b)
    for (int t = 0; t < e.T; ++t) {
      const int row = tokens[b * e.T + t] - e.vocab_start;
      for (int c = 0; c < e.C; ++c) {
        double v = 0.0;
        if (row >= 0 && row < e.V) v += wte[row * e.C + c];
        if (e.with_wpe) v += wpe[t * e.C + c];
        out[(b * e.T + t) * e.C + c] = v;
      }
    }
  return out;
}

class CpuEmbedding : public ::testing::TestWithParam<EmbeddingCase> {};

TEST_P(CpuEmbedding, ForwardAndBackwardMatchReference) {
  const EmbeddingCase e = GetParam();
  CpuBackend backend;
  // Tokens cover rows below, inside and above this rank's [vocab_start, vocab_start + V).
  std::vector<int32_t> tokens = RandomInts(e.B * e.T, 11, 0, e.vocab_start + e.V + 3);
  tokens[0] = e.vocab_start;
  tokens[1] = e.vocab_start + e.V - 1;
  tokens[2] = e.vocab_start + e.V;  // just past this rank's rows
  tokens[3] = -1;
  std::vector<float> wte = RandomFloats(e.V * e.C, 12), wpe = RandomFloats(e.max_t * e.C, 13);
  std::vector<float> out(e.B * e.T * e.C, 99.f);
  Tensor wpe_t = e.with_wpe ? View(wpe, {e.max_t, e.C}) : Tensor();
  ASSERT_TRUE(backend
                  .EmbeddingForward(View(out, {e.B, e.T, e.C}), View(tokens, {e.B, e.T}),
                                    View(wte, {e.V, e.C}), wpe_t, e.vocab_start)
                  .ok());
  const DoubleVec wte_d = ToDouble(wte), wpe_d = ToDouble(wpe);
  EXPECT_TRUE(AllClose(out, EmbeddingReference(tokens, wte_d, wpe_d, e), 1e-6));

  // Backward accumulates into existing gradients.
  const std::vector<float> dout = RandomFloats(out.size(), 14);
  // dwte carries two guard rows past this rank's V rows: tokens >= vocab_start + V must not
  // touch them.
  std::vector<float> dwte = RandomFloats(wte.size() + 2 * e.C, 15),
                     dwpe = RandomFloats(wpe.size(), 16);
  const std::vector<float> dwte0 = dwte, dwpe0 = dwpe;
  std::vector<float> dout_copy = dout;
  ASSERT_TRUE(backend
                  .EmbeddingBackward(
                      View(dwte, {e.V, e.C}), e.with_wpe ? View(dwpe, {e.max_t, e.C}) : Tensor(),
                      View(dout_copy, {e.B * e.T, e.C}), View(tokens, {e.B, e.T}), e.vocab_start)
                  .ok());
  const DoubleVec weights = ToDouble(dout);
  DoubleVec want_dwte = NumericGradient(
      [&](const DoubleVec& x) { return EmbeddingReference(tokens, x, wpe_d, e); }, wte_d, weights);
  for (size_t i = 0; i < want_dwte.size(); ++i) want_dwte[i] += dwte0[i];
  EXPECT_TRUE(AllClose(dwte.data(), want_dwte, 1e-6));
  for (size_t i = wte.size(); i < dwte.size(); ++i) ASSERT_EQ(dwte[i], dwte0[i]) << "guard " << i;
  if (e.with_wpe) {
    DoubleVec want_dwpe =
        NumericGradient([&](const DoubleVec& x) { return EmbeddingReference(tokens, wte_d, x, e); },
                        wpe_d, weights);
    for (size_t i = 0; i < want_dwpe.size(); ++i) want_dwpe[i] += dwpe0[i];
    EXPECT_TRUE(AllClose(dwpe, want_dwpe, 1e-6));
  } else {
    EXPECT_EQ(dwpe, dwpe0);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuEmbedding,
                         ::testing::Values(EmbeddingCase{2, 5, 6, 7, 0, 8, true},
                                           EmbeddingCase{2, 5, 6, 7, 4, 8, true},
                                           EmbeddingCase{3, 4, 40, 9, 9, 4, false}));

// ---- LayerNorm ----

// out = (x - mean) / sqrt(var + 1e-5) * w + b over each row; mean/rstd appended when asked.
DoubleVec LayerNormReference(const DoubleVec& x, const DoubleVec& w, const DoubleVec& b, int N,
                             int C, DoubleVec* mean = nullptr, DoubleVec* rstd = nullptr) {
  DoubleVec out(x.size());
  for (int n = 0; n < N; ++n) {
    double mu = 0.0, var = 0.0;
    for (int c = 0; c < C; ++c) mu += x[n * C + c] / C;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mu) * (x[n * C + c] - mu) / C;
    const double s = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - mu) * s * w[c] + b[c];
    if (mean) mean->push_back(mu);
    if (rstd) rstd->push_back(s);
  }
  return out;
}

TEST(CpuLayerNorm, ForwardAndBackwardMatchReference) {
  const int B = 2, T = 3, N = B * T, C = 37;
  CpuBackend backend;
  std::vector<float> x = RandomFloats(N * C, 21, -2.f, 3.f), w = RandomFloats(C, 22, 0.5f, 1.5f),
                     b = RandomFloats(C, 23);
  std::vector<float> out(N * C), mean(N), rstd(N);
  ASSERT_TRUE(backend
                  .LayerNormForward(View(out, {B, T, C}), View(mean, {N}), View(rstd, {N}),
                                    View(x, {B, T, C}), View(w, {C}), View(b, {C}))
                  .ok());
  const DoubleVec xd = ToDouble(x), wd = ToDouble(w), bd = ToDouble(b);
  DoubleVec want_mean, want_rstd;
  const DoubleVec want = LayerNormReference(xd, wd, bd, N, C, &want_mean, &want_rstd);
  EXPECT_TRUE(AllClose(out, want, 1e-5));
  EXPECT_TRUE(AllClose(mean, want_mean, 1e-6));
  EXPECT_TRUE(AllClose(rstd, want_rstd, 1e-6));

  const std::vector<float> dout = RandomFloats(N * C, 24);
  std::vector<float> din = RandomFloats(N * C, 25), dw = RandomFloats(C, 26),
                     db = RandomFloats(C, 27);
  const std::vector<float> din0 = din, dw0 = dw, db0 = db;
  std::vector<float> dout_copy = dout;
  ASSERT_TRUE(backend
                  .LayerNormBackward(View(din, {N, C}), View(dw, {C}), View(db, {C}), Tensor(),
                                     View(dout_copy, {N, C}), View(x, {N, C}), View(w, {C}),
                                     View(mean, {N}), View(rstd, {N}))
                  .ok());
  const DoubleVec weights = ToDouble(dout);
  auto plus = [](DoubleVec g, const std::vector<float>& base) {
    for (size_t i = 0; i < g.size(); ++i) g[i] += base[i];
    return g;
  };
  EXPECT_TRUE(AllClose(
      din,
      plus(NumericGradient([&](const DoubleVec& v) { return LayerNormReference(v, wd, bd, N, C); },
                           xd, weights),
           din0),
      1e-4));
  EXPECT_TRUE(AllClose(
      dw,
      plus(NumericGradient([&](const DoubleVec& v) { return LayerNormReference(xd, v, bd, N, C); },
                           wd, weights),
           dw0),
      1e-4));
  EXPECT_TRUE(AllClose(
      db,
      plus(NumericGradient([&](const DoubleVec& v) { return LayerNormReference(xd, wd, v, N, C); },
                           bd, weights),
           db0),
      1e-4));
}

TEST(CpuLayerNorm, AddLayerNormForwardAddsThenNormalizes) {
  const int N = 5, C = 24;
  CpuBackend backend;
  std::vector<float> a = RandomFloats(N * C, 31), b = RandomFloats(N * C, 32),
                     w = RandomFloats(C, 33), bias = RandomFloats(C, 34);
  std::vector<float> out(N * C), mean(N), rstd(N), residual = a;  // residual aliases a's copy
  ASSERT_TRUE(backend
                  .AddLayerNormForward(View(residual, {N, C}), View(out, {N, C}), View(mean, {N}),
                                       View(rstd, {N}), View(residual, {N, C}), View(b, {N, C}),
                                       View(w, {C}), View(bias, {C}))
                  .ok());
  DoubleVec sum(N * C);
  for (int i = 0; i < N * C; ++i) sum[i] = static_cast<double>(a[i]) + b[i];
  EXPECT_TRUE(AllClose(residual, sum, 1e-7));
  EXPECT_TRUE(AllClose(out, LayerNormReference(sum, ToDouble(w), ToDouble(bias), N, C), 1e-5));
}

// ---- shape errors ----

TEST(CpuBackendShapes, MismatchesReturnErrorsNamingTheOp) {
  CpuBackend backend;
  std::vector<float> in(8 * 64), weight(256 * 32), out(8 * 256), bias(256);
  Status s = backend.MatmulForward(View(out, {8, 256}), Tensor(), View(in, {8, 64}),
                                   View(weight, {256, 32}), View(bias, {256}), Activation::kNone);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("MatmulForward"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("in (8, 64) and weight (256, 32) disagree on C"), std::string::npos)
      << s.message();

  // GELU without pre_act; f32 tensor where i32 tokens are expected; wrong stats size.
  std::vector<float> w2(256 * 64);
  EXPECT_FALSE(backend
                   .MatmulForward(View(out, {8, 256}), Tensor(), View(in, {8, 64}),
                                  View(w2, {256, 64}), Tensor(), Activation::kGelu)
                   .ok());
  std::vector<float> table(10 * 64), tokens_f(8);
  s = backend.EmbeddingForward(View(in, {1, 8, 64}), View(tokens_f, {1, 8}), View(table, {10, 64}),
                               Tensor(), 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("i32"), std::string::npos) << s.message();
  std::vector<float> qkv(2 * 4 * 24), att(2 * 4 * 8), stats(2 * 2 * 3);
  s = backend.AttentionForward(View(att, {2, 4, 8}), View(stats, {2, 2, 3}), View(qkv, {2, 4, 24}),
                               2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("stats"), std::string::npos) << s.message();
  EXPECT_FALSE(
      backend
          .AttentionForward(View(att, {2, 4, 8}), View(stats, {2, 2, 3}), View(qkv, {2, 4, 24}), 3)
          .ok());
  std::vector<float> a(10), b(12);
  EXPECT_FALSE(backend.Add(View(a, {10}), View(a, {10}), View(b, {12})).ok());
  std::vector<float> mean(3), rstd(4), x(4 * 6), lw(6), lb(6), lout(4 * 6);
  EXPECT_FALSE(backend
                   .LayerNormForward(View(lout, {4, 6}), View(mean, {3}), View(rstd, {4}),
                                     View(x, {4, 6}), View(lw, {6}), View(lb, {6}))
                   .ok());
  std::vector<float> logits(4 * 10), row_max(3);
  s = backend.CrossEntropyRowMax(View(row_max, {3}), View(logits, {4, 10}), 0, 10);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ExitCode::kRuntime);
  std::vector<float> p(5), master(5), grad(6), m(5), v(5);
  EXPECT_FALSE(backend
                   .AdamW(View(p, {5}), View(master, {5}), View(grad, {6}), View(m, {5}),
                          View(v, {5}), AdamWParams{})
                   .ok());
}

// The contracts are Backend's (op_contracts.cpp), one wording for every backend: the op, the
// backend, both tensors and their shapes; aliasing rules and optional outputs as backend.h says.
TEST(CpuBackendShapes, ContractsAreStatedOnceForEveryBackend) {
  CpuBackend backend;
  std::vector<float> x(4 * 6), y(4 * 6), mean(3), rstd(4), w(6), b(6);
  Status s = backend.LayerNormForward(View(y, {4, 6}), View(mean, {3}), View(rstd, {4}),
                                      View(x, {4, 6}), View(w, {6}), View(b, {6}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("LayerNormForward (cpu backend, rank"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("mean (3)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("in (4, 6)"), std::string::npos) << s.message();

  // MatmulForwardAddResidual: out must not alias the residual (the default runs the GEMM first).
  std::vector<float> in(4 * 6), weight(5 * 6), res(4 * 5);
  s = backend.MatmulForwardAddResidual(View(res, {4, 5}), View(in, {4, 6}), View(weight, {5, 6}),
                                       Tensor(), View(res, {4, 5}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("alias"), std::string::npos) << s.message();

  // MatmulBackward skips an empty dweight (as on the GPU): din alone.
  std::vector<float> dout(4 * 5, 1.f), din(4 * 6), wones(5 * 6, 0.5f);
  ASSERT_TRUE(backend
                  .MatmulBackward(View(din, {4, 6}), Tensor(), Tensor(), View(dout, {4, 5}),
                                  View(in, {4, 6}), View(wones, {5, 6}), GradientWrite::kOverwrite)
                  .ok());
  for (float v : din) EXPECT_FLOAT_EQ(v, 2.5f);
  // MatmulBackwardThroughGelu needs din and gelu_pre_act.
  EXPECT_FALSE(backend
                   .MatmulBackwardThroughGelu(Tensor(), Tensor(), Tensor(), View(dout, {4, 5}),
                                              View(in, {4, 6}), View(wones, {5, 6}), Tensor(),
                                              Tensor(), GradientWrite::kOverwrite)
                   .ok());

  // Convert and Scale take f32 or bf16; Convert wants the same number of elements.
  std::vector<int32_t> ints(4);
  EXPECT_FALSE(backend.Convert(View(x, {4}), Tensor(ints.data(), DType::kI32, {4})).ok());
  EXPECT_FALSE(backend.Convert(View(x, {5}), View(y, {4})).ok());
  EXPECT_TRUE(backend.Scale(Tensor(), 2.f).ok());
  EXPECT_FALSE(backend.Scale(Tensor(ints.data(), DType::kI32, {4}), 2.f).ok());
}

}  // namespace
}  // namespace trainer
