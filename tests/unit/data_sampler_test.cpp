// Tests of the global sample order (src/data/sampler.h): splitmix64 against its published
// reference outputs, each epoch a permutation, seeds, epoch crossing, DP slicing that does not
// change the global batches, and the validation sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "data/sampler.h"

namespace trainer {
namespace {

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(SamplerTest, SplitMix64MatchesReferenceOutputs) {
  // The first outputs of Vigna's splitmix64.c seeded with 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454fULL);
}

TEST(SamplerTest, BelowIsRoughlyUniform) {
  SplitMix64 rng(42);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) ++counts[rng.Below(6)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

TEST(SamplerTest, EveryEpochIsAPermutation) {
  const int64_t n = 1000;
  GlobalSampler sampler(n, 7);
  std::vector<int64_t> previous;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> order = sampler.GlobalBatch(epoch * n, static_cast<int>(n));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, Iota(n)) << "epoch " << epoch;
    EXPECT_NE(order, Iota(n));   // actually shuffled
    EXPECT_NE(order, previous);  // a new order each epoch
    previous = order;
  }
}

// Sets past GlobalSampler::kMostTabledSamples are ordered by a FeistelPermutation; here forced
// on small sets (most_tabled 0) so that every order can be checked whole.
TEST(SamplerTest, FeistelOrdersArePermutationsOfAnySize) {
  for (int64_t n : {1, 2, 3, 4, 5, 17, 1000, 4096, 4097, 65537}) {
    GlobalSampler sampler(n, 11, {}, 0);
    std::vector<int64_t> previous;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const std::vector<int64_t> order = sampler.GlobalBatch(epoch * n, static_cast<int>(n));
      std::vector<int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      ASSERT_EQ(sorted, Iota(n)) << "n " << n << " epoch " << epoch;
      if (n >= 5) {
        EXPECT_NE(order, Iota(n)) << "n " << n;
        EXPECT_NE(order, previous) << "n " << n;
      }
      previous = order;
    }
  }
  // The same seed gives the same order, another seed another; the tabled order is not reused.
  EXPECT_EQ(GlobalSampler(1000, 3, {}, 0).GlobalBatch(0, 1000),
            GlobalSampler(1000, 3, {}, 0).GlobalBatch(0, 1000));
  EXPECT_NE(GlobalSampler(1000, 3, {}, 0).GlobalBatch(0, 1000),
            GlobalSampler(1000, 4, {}, 0).GlobalBatch(0, 1000));
  EXPECT_NE(GlobalSampler(1000, 3, {}, 0).GlobalBatch(0, 1000),
            GlobalSampler(1000, 3).GlobalBatch(0, 1000));
}

// A shuffle, not a fixed pattern: over many epochs every sample is as likely at the first place
// as any other (a chi-square test, n = 10 places, 20000 epochs), two samples' relative order is
// a coin flip, and the orders of neighbouring places do not follow each other.
TEST(SamplerTest, FeistelOrdersAreUniform) {
  const int64_t n = 10, epochs = 20000;
  GlobalSampler sampler(n, 5, {}, 0);
  std::vector<double> first(n, 0);
  int before = 0, ascending = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    const std::vector<int64_t> order = sampler.GlobalBatch(epoch * n, static_cast<int>(n));
    ++first[order[0]];
    const auto place = [&](int64_t sample) {
      return std::find(order.begin(), order.end(), sample);
    };
    before += place(0) < place(1);
    ascending += order[1] == order[0] + 1;
  }
  double chi2 = 0;
  for (double c : first) chi2 += (c - epochs / n) * (c - epochs / n) / (epochs / n);
  EXPECT_LT(chi2, 27.9);  // 9 degrees of freedom: p = 0.001
  EXPECT_NEAR(before, epochs / 2, 4 * std::sqrt(epochs / 4.0));
  // order[1] == order[0] + 1 has probability 9/90 = 0.1 under a uniform shuffle.
  EXPECT_NEAR(ascending, epochs / 10, 4 * std::sqrt(epochs * 0.1 * 0.9));
}

// Past the table's limit each position costs a few Feistel passes: no order of the whole set is
// made, so a set of 2^40 samples starts at once and in little memory.
TEST(SamplerTest, HugeSetsAreOrderedWithoutATable) {
  const int64_t n = int64_t{1} << 40;
  GlobalSampler sampler(n, 9);
  const std::vector<int64_t> batch = sampler.GlobalBatch(n - 2, 4);  // crosses into epoch 1
  ASSERT_EQ(batch.size(), 4u);
  for (int64_t id : batch) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, n);
  }
  EXPECT_EQ(batch, GlobalSampler(n, 9).GlobalBatch(n - 2, 4));
  EXPECT_EQ(std::set<int64_t>(batch.begin(), batch.begin() + 2).size(), 2u);
}

TEST(SamplerTest, SameSeedSameOrderDifferentSeedDifferentOrder) {
  GlobalSampler a(500, 1234), b(500, 1234), c(500, 1235);
  EXPECT_EQ(a.GlobalBatch(0, 500), b.GlobalBatch(0, 500));
  EXPECT_EQ(a.GlobalBatch(1000, 500), b.GlobalBatch(1000, 500));
  EXPECT_NE(a.GlobalBatch(0, 500), c.GlobalBatch(0, 500));
}

TEST(SamplerTest, BatchesWalkTheEpochOrdersAndCrossEpochs) {
  const int64_t n = 10;
  GlobalSampler sampler(n, 99);
  const std::vector<int64_t> epoch0 = GlobalSampler(n, 99).GlobalBatch(0, n);
  const std::vector<int64_t> epoch1 = GlobalSampler(n, 99).GlobalBatch(n, n);
  std::vector<int64_t> both = epoch0;
  both.insert(both.end(), epoch1.begin(), epoch1.end());
  // Batches of 4 from position 0: the concatenated orders, crossing into epoch 1 at 8..11.
  for (int64_t consumed = 0; consumed + 4 <= 2 * n; consumed += 4) {
    std::vector<int64_t> batch = sampler.GlobalBatch(consumed, 4);
    EXPECT_EQ(batch, std::vector<int64_t>(both.begin() + consumed, both.begin() + consumed + 4))
        << "consumed " << consumed;
  }
  // Resuming from any position gives what an uninterrupted run would have seen.
  GlobalSampler resumed(n, 99);
  EXPECT_EQ(resumed.GlobalBatch(9, 3), (std::vector<int64_t>{epoch0[9], epoch1[0], epoch1[1]}));
  EXPECT_EQ(sampler.EpochOf(19), 1);
  EXPECT_EQ(sampler.EpochOf(20), 2);
}

// Data.shift_windows: one shift per epoch, in [0, T), not the same every epoch, the same for
// any sampler made with the seed (so every rank and a resumed run agree), and seed-dependent.
TEST(SamplerTest, WindowShiftIsOnePerEpochAndCoversItsRange) {
  const int T = 16;
  GlobalSampler sampler(10, 42), again(10, 42), other(10, 43);
  std::set<int64_t> seen;
  int differs = 0;
  for (int64_t epoch = 0; epoch < 200; ++epoch) {
    const int64_t shift = sampler.WindowShift(epoch * 10, T);
    ASSERT_GE(shift, 0);
    ASSERT_LT(shift, T);
    for (int64_t k = 1; k < 10; ++k) ASSERT_EQ(sampler.WindowShift(epoch * 10 + k, T), shift);
    ASSERT_EQ(again.WindowShift(epoch * 10 + 3, T), shift);
    differs += other.WindowShift(epoch * 10, T) != shift;
    seen.insert(shift);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(T));  // 200 draws over 16 values reach them all
  EXPECT_GT(differs, 150);                         // another seed: mostly other shifts
  EXPECT_EQ(sampler.WindowShift(5, 1), 0);
}

TEST(SamplerTest, DpSlicesConcatenateToTheGlobalBatchForAnyDpSize) {
  GlobalSampler sampler(1000, 5);
  const int global_batch = 16;
  for (int64_t step = 0; step < 100; ++step) {  // crosses the epoch end at sample 1000
    std::vector<int64_t> global = sampler.GlobalBatch(step * global_batch, global_batch);
    for (int dp : {1, 2, 4}) {
      std::vector<int64_t> joined;
      for (int rank = 0; rank < dp; ++rank) {
        std::vector<int64_t> slice = GlobalSampler::DpSlice(global, rank, dp);
        EXPECT_EQ(slice.size(), static_cast<size_t>(global_batch / dp));
        joined.insert(joined.end(), slice.begin(), slice.end());
      }
      ASSERT_EQ(joined, global) << "dp " << dp << " step " << step;
    }
  }
  // Uneven sizes still partition the batch.
  std::vector<int64_t> seven = Iota(7);
  std::vector<int64_t> joined;
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<int64_t> slice = GlobalSampler::DpSlice(seven, rank, 3);
    joined.insert(joined.end(), slice.begin(), slice.end());
  }
  EXPECT_EQ(joined, seven);
  EXPECT_TRUE(GlobalSampler::DpSlice(seven, 3, 3).empty());
}

TEST(SamplerTest, ValidationBatchesCycleInOrder) {
  EXPECT_EQ(ValidationBatch(0, 3, 5), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(ValidationBatch(1, 3, 5), (std::vector<int64_t>{3, 4, 0}));
  EXPECT_EQ(ValidationBatch(2, 3, 5), (std::vector<int64_t>{1, 2, 3}));
  for (int64_t index : {0LL, 1LL, 17LL, 123456789LL}) {
    for (int batch : {1, 4, 7, 13}) {
      std::vector<int64_t> expected;
      for (int j = 0; j < batch; ++j) expected.push_back((index * batch + j) % 11);
      EXPECT_EQ(ValidationBatch(index, batch, 11), expected) << index << " " << batch;
    }
  }
  EXPECT_TRUE(ValidationBatch(0, 4, 0).empty());
}

// Data.train_weights: entry s takes max(1, round(w n)) places an epoch, and in epoch e its place o
// holds sample first + (e places + o) mod n (worked out by hand below).
TEST(SamplerTest, EpochPlanWeighsEntries) {
  const EpochPlan plan({4, 6}, {0.5, 2.0});
  ASSERT_EQ(plan.places(), 2 + 12);
  EXPECT_EQ(plan.SampleAt(0, 0), 0);
  EXPECT_EQ(plan.SampleAt(0, 1), 1);
  EXPECT_EQ(plan.SampleAt(1, 0), 2);  // the half the first epoch left out
  EXPECT_EQ(plan.SampleAt(1, 1), 3);
  EXPECT_EQ(plan.SampleAt(2, 1), 1);  // and round again
  for (int64_t e : {0, 1, 5}) {
    for (int64_t o = 0; o < 12; ++o) EXPECT_EQ(plan.SampleAt(e, 2 + o), 4 + o % 6);
  }
  EXPECT_EQ(EpochPlan({3}, {0.1}).places(), 1);      // at least one place
  EXPECT_EQ(EpochPlan({0, 5}, {3, 1}).places(), 5);  // an entry without samples takes none
  EXPECT_EQ(EpochPlan({0, 5}, {3, 1}).SampleAt(0, 4), 4);
  EXPECT_EQ(EpochPlan({7}, {1e9}).SampleAt(123456789, 6999999999),
            (123456789LL * 7000000000LL % 7 + 6999999999LL) % 7);

  // Over one epoch of the sampler, each of entry 1's samples comes twice, and entry 0 gives two
  // samples: 0 and 1 in epoch 0, 2 and 3 in epoch 1.
  GlobalSampler sampler(10, 42, plan);
  ASSERT_EQ(sampler.num_samples(), 14);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> count(10, 0);
    for (int64_t id : sampler.GlobalBatch(epoch * 14, 14)) ++count[static_cast<size_t>(id)];
    const std::vector<int> want = epoch == 0 ? std::vector<int>{1, 1, 0, 0, 2, 2, 2, 2, 2, 2}
                                             : std::vector<int>{0, 0, 1, 1, 2, 2, 2, 2, 2, 2};
    EXPECT_EQ(count, want) << "epoch " << epoch;
  }
}

}  // namespace
}  // namespace trainer
