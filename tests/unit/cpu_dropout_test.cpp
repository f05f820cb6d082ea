// Dropout on the CPU backend: Philox4x32-10 against Random123's published known-answer vectors,
// the hidden-state op's mask against a Philox written again here from the key layout that
// philox.h documents, its keep fraction within a binomial bound of 1 - p, the kept values scaled
// by 1 / (1 - p), the residual add, the backward (the same op on the gradient) as the mask times
// the gradient, a row block (sequence parallelism) drawing the rows of the whole, and attention
// dropout against a double-precision reference with the same mask, forward and backward (finite
// differences with the mask fixed).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "model/cpu/cpu_backend.h"
#include "model/philox.h"
#include "cpu_test_util.h"

namespace trainer {
namespace {

using namespace testing;  // trainer::testing: the CPU tests' helpers

// Philox4x32-10 as Random123's philox.h writes it: ten rounds of the S-box on (ctr, key), the
// key bumped by the Weyl constants before rounds 2..10.
std::array<uint32_t, 4> ReferencePhilox(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  for (int r = 0; r < 10; ++r) {
    const uint64_t a = 0xD2511F53ull * ctr[0], b = 0xCD9E8D57ull * ctr[2];
    ctr = {static_cast<uint32_t>(b >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(b),
           static_cast<uint32_t>(a >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(a)};
    key = {key[0] + 0x9E3779B9u, key[1] + 0xBB67AE85u};
  }
  return ctr;
}

// Whether element (sample, position, column) of a site is kept, from philox.h's documented key.
bool ReferenceKeep(uint64_t seed, uint32_t step, uint32_t kind, int layer, int head,
                   int64_t sample, int64_t position, int64_t column, float p) {
  const uint32_t k0 = static_cast<uint32_t>(seed) ^ static_cast<uint32_t>(seed >> 32);
  const uint32_t k1 = kind | (static_cast<uint32_t>(layer + 1) << 2) |
                      (static_cast<uint32_t>(head) << 16);
  const auto words = ReferencePhilox({static_cast<uint32_t>(column / 4),
                                      static_cast<uint32_t>(position),
                                      static_cast<uint32_t>(sample), step},
                                     {k0, k1});
  return static_cast<double>(words[column % 4]) >= std::floor(p * 4294967296.0);
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  const Philox4 zero = Philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const Philox4 ones = Philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  const Philox4 pi = Philox4x32_10(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822,
                                   0x299f31d0);
  const uint32_t want[4] = {0xd16cfe09u, 0x94fdcceb, 0x5001e420u, 0x24126ea1u};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pi.v[i], want[i]) << i;
  const auto ref = ReferencePhilox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                                   {0xa4093822, 0x299f31d0});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ref[i], want[i]) << i;
}

DropoutKey HiddenKey(float p) {
  DropoutKey k;
  k.p = p;
  k.seed = 0x1234567890abcdefull;
  k.step = 17;
  k.first_sample = 5;
  k.seq_len = 7;
  k.layer = 3;
  k.kind = kDropoutMlpOut;
  return k;
}

TEST(CpuDropout, MaskIsPhiloxKeepFractionIsBinomialKeptValuesScaled) {
  const int N = 3 * 7, C = 1001;  // C not a multiple of 4: a partial last group
  const float p = 0.3f;
  const DropoutKey key = HiddenKey(p);
  CpuBackend backend;
  std::vector<float> in = RandomFloats(N * C, 1, 0.5f, 1.5f), out(in.size(), 9.f);
  ASSERT_TRUE(backend.Dropout(View(out, {N, C}), View(in, {N, C}), Tensor(), key).ok());
  int64_t kept = 0;
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) {
      const bool keep = ReferenceKeep(key.seed, key.step, key.kind, key.layer, 0,
                                      key.first_sample + r / key.seq_len, r % key.seq_len, c, p);
      const size_t i = static_cast<size_t>(r) * C + c;
      ASSERT_EQ(out[i], keep ? in[i] * (1.f / (1.f - p)) : 0.f) << "row " << r << " col " << c;
      kept += keep;
    }
  const double n = static_cast<double>(N) * C, mean = n * (1 - p);
  EXPECT_NEAR(static_cast<double>(kept), mean, 5 * std::sqrt(n * p * (1 - p)));
  // Another step, layer or site draws another mask.
  for (auto change : {+[](DropoutKey* k) { k->step++; }, +[](DropoutKey* k) { k->layer++; },
                      +[](DropoutKey* k) { k->kind = kDropoutAttnOut; },
                      +[](DropoutKey* k) { k->first_sample++; }}) {
    DropoutKey other = key;
    change(&other);
    std::vector<float> again(in.size());
    ASSERT_TRUE(backend.Dropout(View(again, {N, C}), View(in, {N, C}), Tensor(), other).ok());
    EXPECT_NE(again, out);
  }
}

// The backward is the op on the gradient: the mask times the upstream gradient (times the
// scale); with a residual it adds the residual; a row block with first_row draws the whole's rows.
TEST(CpuDropout, BackwardResidualAndRowBlocks) {
  const int N = 4 * 5, C = 24;
  const float p = 0.5f;
  DropoutKey key = HiddenKey(p);
  key.seq_len = 5;
  CpuBackend backend;
  std::vector<float> dy = RandomFloats(N * C, 2), dx(dy.size());
  ASSERT_TRUE(backend.Dropout(View(dx, {N, C}), View(dy, {N, C}), Tensor(), key).ok());
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) {
      const bool keep = ReferenceKeep(key.seed, key.step, key.kind, key.layer, 0,
                                      key.first_sample + r / 5, r % 5, c, p);
      ASSERT_EQ(dx[r * C + c], keep ? dy[r * C + c] * 2.f : 0.f);
    }
  std::vector<float> residual = RandomFloats(N * C, 3), with(dy.size());
  ASSERT_TRUE(
      backend.Dropout(View(with, {N, C}), View(dy, {N, C}), View(residual, {N, C}), key).ok());
  for (size_t i = 0; i < with.size(); ++i) ASSERT_EQ(with[i], residual[i] + dx[i]) << i;
  // Rows [8, 16) as a rank of a sequence-parallel group holds them.
  DropoutKey block = key;
  block.first_row = 8;
  std::vector<float> part(dy.begin() + 8 * C, dy.begin() + 16 * C), part_out(part.size());
  ASSERT_TRUE(backend.Dropout(View(part_out, {8, C}), View(part, {8, C}), Tensor(), block).ok());
  for (size_t i = 0; i < part_out.size(); ++i) ASSERT_EQ(part_out[i], dx[8 * C + i]) << i;
}

// Causal attention with the probabilities dropped by the reference mask, in double precision.
// With starts (B*T, Data.packing: documents) query t sees keys starts[b*T+t] <= s <= t only.
DoubleVec DroppedAttention(const DoubleVec& qkv, int B, int T, int NH, int HS, const DropoutKey& k,
                           const std::vector<int32_t>* starts = nullptr) {
  const int C = NH * HS;
  const double scale = 1.0 / (1.0 - k.p);
  DoubleVec out(static_cast<size_t>(B) * T * C, 0.0);
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * HS + i];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> score(t + 1);
        double max_score = -INFINITY, sum = 0.0;
        const int lo = starts ? (*starts)[static_cast<size_t>(b) * T + t] : 0;
        for (int s = lo; s <= t; ++s) {
          double d = 0.0;
          for (int i = 0; i < HS; ++i) d += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          score[s] = d / std::sqrt(static_cast<double>(HS));
          max_score = std::max(max_score, score[s]);
        }
        for (int s = lo; s <= t; ++s) sum += std::exp(score[s] - max_score);
        for (int s = lo; s <= t; ++s) {
          const bool keep = ReferenceKeep(k.seed, k.step, k.kind, k.layer, k.first_head + h,
                                          k.first_sample + b, t, s, k.p);
          const double w = keep ? std::exp(score[s] - max_score) / sum * scale : 0.0;
          for (int i = 0; i < HS; ++i)
            out[(static_cast<size_t>(b) * T + t) * C + h * HS + i] += w * at(b, s, 2, h, i);
        }
      }
  return out;
}

TEST(CpuDropout, AttentionDropsProbabilitiesForwardAndBackward) {
  const int B = 2, T = 11, NH = 3, HS = 4, C = NH * HS;
  DropoutKey key = HiddenKey(0.25f);
  key.kind = kDropoutAttnProbs;
  key.first_head = 3;  // this rank's heads are 3..5 of a tensor-parallel group
  CpuBackend backend;
  std::vector<float> qkv = RandomFloats(B * T * 3 * C, 71, -1.5f, 1.5f);
  std::vector<float> out(B * T * C), stats(B * NH * T);
  ASSERT_TRUE(backend
                  .AttentionForward(View(out, {B, T, C}), View(stats, {B, NH, T}),
                                    View(qkv, {B, T, 3 * C}), NH, 0, key)
                  .ok());
  const DoubleVec qkvd = ToDouble(qkv);
  EXPECT_TRUE(AllClose(out, DroppedAttention(qkvd, B, T, NH, HS, key), 1e-5));
  const std::vector<float> dout = RandomFloats(out.size(), 72);
  std::vector<float> dout_copy = dout, dqkv(qkv.size(), 1e3f);
  ASSERT_TRUE(backend
                  .AttentionBackward(View(dqkv, {B, T, 3 * C}), View(dout_copy, {B, T, C}),
                                     View(qkv, {B, T, 3 * C}), View(out, {B, T, C}),
                                     View(stats, {B, NH, T}), NH, 0, key)
                  .ok());
  EXPECT_TRUE(AllClose(
      dqkv,
      NumericGradient([&](const DoubleVec& x) { return DroppedAttention(x, B, T, NH, HS, key); },
                      qkvd, ToDouble(dout)),
      1e-4));
}

// Data.packing: documents: attention inside each document only (sample 0: documents at 0, 4
// and 9; sample 1 starts mid-document, then one at 6), with and without attention dropout,
// against the double-precision reference with the same mask, forward and finite differences.
TEST(CpuDropout, AttentionStaysInsideDocuments) {
  const int B = 2, T = 11, NH = 2, HS = 4, C = NH * HS;
  const std::vector<int32_t> starts = {0, 0, 0, 0, 4, 4, 4, 4, 4, 9, 9,
                                       0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6};
  std::vector<int32_t> s = starts;
  const Tensor doc_starts(s.data(), DType::kI32, {B, T});
  for (float p : {0.f, 0.2f}) {
    DropoutKey key = HiddenKey(p);
    key.kind = kDropoutAttnProbs;
    CpuBackend backend;
    std::vector<float> qkv = RandomFloats(B * T * 3 * C, 73, -1.5f, 1.5f);
    std::vector<float> out(B * T * C), stats(B * NH * T);
    ASSERT_TRUE(backend
                    .AttentionForward(View(out, {B, T, C}), View(stats, {B, NH, T}),
                                      View(qkv, {B, T, 3 * C}), NH, 0, key, doc_starts)
                    .ok());
    const DoubleVec qkvd = ToDouble(qkv);
    auto reference = [&](const DoubleVec& x) {
      return DroppedAttention(x, B, T, NH, HS, key, &starts);
    };
    EXPECT_TRUE(AllClose(out, reference(qkvd), 1e-5)) << p;
    EXPECT_FALSE(AllClose(out, DroppedAttention(qkvd, B, T, NH, HS, key), 1e-3)) << p;
    const std::vector<float> dout = RandomFloats(out.size(), 74);
    std::vector<float> dout_copy = dout, dqkv(qkv.size(), 1e3f);
    ASSERT_TRUE(backend
                    .AttentionBackward(View(dqkv, {B, T, 3 * C}), View(dout_copy, {B, T, C}),
                                       View(qkv, {B, T, 3 * C}), View(out, {B, T, C}),
                                       View(stats, {B, NH, T}), NH, 0, key, doc_starts)
                    .ok());
    EXPECT_TRUE(AllClose(dqkv, NumericGradient(reference, qkvd, ToDouble(dout)), 1e-4)) << p;
  }
}

// Model.lora_dropout: the mask of adapter slot s is philox.h's with kind bits 0 and head s + 1,
// drawn by global column (a row-parallel adapter's input block: first_column), and its key word
// differs from every hidden-state and attention mask's of the layer (which keep their keys).
TEST(CpuDropout, LoraMasksHaveKeysOfTheirOwn) {
  const int N = 9, C = 10;
  CpuBackend backend;
  std::vector<float> x = RandomFloats(N * C, 75, 0.5f, 1.5f);  // no zeros
  for (uint32_t slot = 0; slot < 7; ++slot) {
    DropoutKey key = HiddenKey(0.3f);
    key.kind = kDropoutLora + slot;
    key.first_column = 5 + slot;
    std::vector<float> y(x.size());
    ASSERT_TRUE(backend.Dropout(View(y, {N, C}), View(x, {N, C}), Tensor(), key).ok());
    for (int r = 0; r < N; ++r)
      for (int c = 0; c < C; ++c) {
        const int64_t row = r;
        const bool keep =
            ReferenceKeep(key.seed, key.step, 0, key.layer, static_cast<int>(slot) + 1,
                          key.first_sample + row / key.seq_len, row % key.seq_len,
                          key.first_column + c, key.p);
        ASSERT_EQ(y[r * C + c] != 0.f, keep) << slot << " " << r << " " << c;
      }
  }
  for (int layer : {-1, 0, 3}) {
    std::vector<uint32_t> words;
    for (uint32_t kind : {kDropoutEmbedding, kDropoutAttnOut, kDropoutMlpOut})
      words.push_back(DropoutKey1(kind, layer, 0));
    for (int head = 0; head < 4096; ++head)
      words.push_back(DropoutKey1(kDropoutAttnProbs, layer, head));
    for (uint32_t slot = 0; slot < 7; ++slot)
      words.push_back(DropoutKey1(kDropoutLora + slot, layer, 0));
    std::sort(words.begin(), words.end());
    EXPECT_EQ(std::adjacent_find(words.begin(), words.end()), words.end()) << layer;
  }
}

}  // namespace
}  // namespace trainer
