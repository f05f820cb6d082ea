// The global sample order: GlobalSampler turns "samples consumed so far" into the sample ids of
// the next global batch (a seeded permutation per epoch, identical for every DP size and every
// standard library), DpSlice cuts a rank's contiguous block out of it, and ValidationBatch walks
// the validation samples in order. The only state to checkpoint is consumed_samples.
#pragma once

#include <cstddef>
#include <cstdint>
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

class GlobalSampler {
 public:
  // Orders the ids [0, num_samples) of a training split; epoch e's order is a Fisher-Yates
  // permutation driven by SplitMix64(mix(seed, e)). With a plan, the permutation orders the
  // plan's places, and each place gives its sample (num_samples is then plan.places()).
  GlobalSampler(int64_t num_samples, uint64_t seed, EpochPlan plan = {});

  int64_t num_samples() const { return num_samples_; }
  // The epoch a position falls in: consumed_samples / num_samples.
  int64_t EpochOf(int64_t consumed_samples) const;
  // Data.shift_windows: how far the windows of the epoch of `position` (a consumed-samples
  // index) start past their fixed places, in [0, seq_len); the same for every sample of an epoch.
  int64_t WindowShift(int64_t position, int seq_len) const;
  // The order of `epoch` (a permutation of [0, num_samples)); computed once per epoch and cached.
  const std::vector<int64_t>& EpochOrder(int64_t epoch);

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
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;  // (num_samples) the cached epoch's order
};

// Batch `index` of the deterministic validation sequence: ids (index*batch_size + j) mod
// num_samples for j in [0, batch_size), cycling over the validation split without shuffling.
std::vector<int64_t> ValidationBatch(int64_t index, int batch_size, int64_t num_samples);

}  // namespace trainer
