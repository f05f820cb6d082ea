// The global sample order: GlobalSampler turns "samples consumed so far" into the sample ids of
// the next global batch (a seeded permutation per epoch, identical for every DP size and every
// standard library: a table for sets of up to 2^24 samples, a Feistel network evaluated one
// position at a time above), DpSlice cuts a rank's contiguous block out of it, and
// ValidationBatch walks the validation samples in order. The only state to checkpoint is
// consumed_samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace trainer {

// splitmix64: a small, well-mixed 64-bit generator with a fully specified output sequence.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, bound) without modulo bias (bound > 0).
  uint64_t Below(uint64_t bound);

 private:
  uint64_t state_;
};

// How each epoch visits the training samples when Data.train_weights weighs the entries of
// Data.train_path. Entry s (the set's samples [first_s, first_s + n_s)) takes
// c_s = max(1, round(w_s n_s)) places of every epoch, and in epoch e its place o holds sample
// first_s + (e c_s + o) mod n_s: a weight of 2 visits each of its samples twice an epoch, 0.5
// half of them (the other half the next epoch). An empty plan: each place is its own sample.
class EpochPlan {
 public:
  EpochPlan() = default;
  // entry_samples: n_s of each entry, in set order (entries without samples take no places).
  EpochPlan(const std::vector<int64_t>& entry_samples, const std::vector<double>& weights);

  bool empty() const { return sizes_.empty(); }
  int64_t places() const { return starts_.empty() ? 0 : starts_.back(); }
  int64_t SampleAt(int64_t epoch, int64_t place) const;

 private:
  std::vector<int64_t> starts_;  // entry s's first place, then the total
  std::vector<int64_t> first_;   // entry s's first sample
  std::vector<int64_t> sizes_;   // n_s
};

// A keyed permutation of [0, n) computed one index at a time, without a table: a balanced
// Feistel network of six rounds (splitmix64's mixer keyed per round) over the h-bit halves of
// [0, 4^h), the smallest such range holding n, whose outputs at or past n are fed through it
// again until one falls below n (cycle walking: a bijection of [0, n), on average fewer than four
// passes).
class FeistelPermutation {
 public:
  static constexpr int kRounds = 6;
  FeistelPermutation(int64_t n, SplitMix64* keys);
  int64_t operator()(int64_t index) const;

 private:
  uint64_t Encrypt(uint64_t x) const;
  int64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[kRounds];
};

class GlobalSampler {
 public:
  // Sets of at most this many samples (or places) are ordered by a table (8 bytes a sample on
  // every rank, made at each epoch's start); larger ones by a FeistelPermutation.
  static constexpr int64_t kMostTabledSamples = int64_t{1} << 24;

  // Orders the ids [0, num_samples) of a training split; epoch e's order is driven by
  // SplitMix64(mix(seed, e)): a Fisher-Yates permutation up to `most_tabled` samples, a
  // FeistelPermutation keyed by its first outputs above. With a plan, the permutation orders the
  // plan's places, and each place gives its sample (num_samples is then plan.places()).
  GlobalSampler(int64_t num_samples, uint64_t seed, EpochPlan plan = {},
                int64_t most_tabled = kMostTabledSamples);

  int64_t num_samples() const { return num_samples_; }
  // The epoch a position falls in: consumed_samples / num_samples.
  int64_t EpochOf(int64_t consumed_samples) const;
  // Data.shift_windows: how far the windows of the epoch of `position` (a consumed-samples
  // index) start past their fixed places, in [0, seq_len); the same for every sample of an epoch.
  int64_t WindowShift(int64_t position, int seq_len) const;
  // Place `index` of epoch `epoch`'s order (a permutation of [0, num_samples)); the epoch's
  // table or keys are made once and kept until another epoch is asked for.
  int64_t OrderAt(int64_t epoch, int64_t index);

  // Split-relative ids of the `global_batch_size` samples after the first `consumed_samples`;
  // a batch that crosses the end of an epoch continues into the next epoch's order.
  std::vector<int64_t> GlobalBatch(int64_t consumed_samples, int global_batch_size);

  // Rank dp_rank's contiguous block of a global batch: elements [r*n/dp, (r+1)*n/dp), i.e.
  // global_batch.size()/dp_size of them when that divides (config validation makes it so).
  static std::vector<int64_t> DpSlice(const std::vector<int64_t>& global_batch, int dp_rank,
                                      int dp_size);

 private:
  int64_t num_samples_;
  uint64_t seed_;
  EpochPlan plan_;
  int64_t most_tabled_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;  // (num_samples) the cached epoch's table, for tabled sets
  std::unique_ptr<FeistelPermutation> permutation_;  // the cached epoch's, for larger sets
};

// Batch `index` of the deterministic validation sequence: ids (index*batch_size + j) mod
// num_samples for j in [0, batch_size), cycling over the validation split without shuffling.
std::vector<int64_t> ValidationBatch(int64_t index, int batch_size, int64_t num_samples);

}  // namespace trainer
