// The global sample order (see sampler.h).
#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace trainer {

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Below(uint64_t bound) {
  // Reject the lowest (2^64 mod bound) values so that every residue is equally likely.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = Next();
    if (r >= threshold) return r % bound;
  }
}

EpochPlan::EpochPlan(const std::vector<int64_t>& entry_samples,
                     const std::vector<double>& weights) {
  starts_.push_back(0);
  int64_t first = 0;
  for (size_t s = 0; s < entry_samples.size() && s < weights.size(); ++s) {
    const int64_t n = entry_samples[s];
    if (n > 0) {
      starts_.push_back(starts_.back() +
                        std::max<int64_t>(1, std::llround(weights[s] * static_cast<double>(n))));
      first_.push_back(first);
      sizes_.push_back(n);
    }
    first += std::max<int64_t>(0, n);
  }
}

int64_t EpochPlan::SampleAt(int64_t epoch, int64_t place) const {
  if (empty()) return place;
  const size_t s = std::upper_bound(starts_.begin(), starts_.end(), place) - starts_.begin() - 1;
  const int64_t n = sizes_[s], places = starts_[s + 1] - starts_[s];
  const __int128 window = static_cast<__int128>(epoch % n) * (places % n);
  return first_[s] + static_cast<int64_t>((window + (place - starts_[s])) % n);
}

FeistelPermutation::FeistelPermutation(int64_t n, SplitMix64* keys) : n_(n), half_bits_(1) {
  while (half_bits_ < 31 && (uint64_t{1} << (2 * half_bits_)) < static_cast<uint64_t>(n))
    ++half_bits_;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (uint64_t& key : keys_) key = keys->Next();
}

uint64_t FeistelPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t key : keys_) {
    SplitMix64 round(key ^ right);  // its first output: splitmix64's mixer of key ^ right
    const uint64_t mixed = left ^ (round.Next() & half_mask_);
    left = right;
    right = mixed;
  }
  return (left << half_bits_) | right;
}

int64_t FeistelPermutation::operator()(int64_t index) const {
  uint64_t x = static_cast<uint64_t>(index);
  do x = Encrypt(x);
  while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

GlobalSampler::GlobalSampler(int64_t num_samples, uint64_t seed, EpochPlan plan,
                             int64_t most_tabled)
    : num_samples_(plan.empty() ? (num_samples < 0 ? 0 : num_samples) : plan.places()),
      seed_(seed),
      plan_(std::move(plan)),
      most_tabled_(most_tabled) {}

int64_t GlobalSampler::EpochOf(int64_t consumed_samples) const {
  return num_samples_ > 0 ? consumed_samples / num_samples_ : 0;
}

int64_t GlobalSampler::WindowShift(int64_t position, int seq_len) const {
  if (seq_len <= 1) return 0;
  SplitMix64 seed_mixer(seed_ ^ 0x2545f4914f6cdd1dULL);  // not the stream of the epoch's order
  SplitMix64 epoch_mixer(static_cast<uint64_t>(EpochOf(position)) ^ 0x5851f42d4c957f2dULL);
  SplitMix64 rng(seed_mixer.Next() ^ epoch_mixer.Next());
  return static_cast<int64_t>(rng.Below(static_cast<uint64_t>(seq_len)));
}

int64_t GlobalSampler::OrderAt(int64_t epoch, int64_t index) {
  if (epoch != cached_epoch_) {
    // Seed and epoch pass through the mixer separately so that nearby seeds and epochs give
    // unrelated streams.
    SplitMix64 seed_mixer(seed_);
    SplitMix64 epoch_mixer(static_cast<uint64_t>(epoch) ^ 0x5851f42d4c957f2dULL);
    SplitMix64 rng(seed_mixer.Next() ^ epoch_mixer.Next());
    if (num_samples_ > most_tabled_) {
      permutation_ = std::make_unique<FeistelPermutation>(num_samples_, &rng);
    } else {
      order_.resize(static_cast<size_t>(num_samples_));
      for (int64_t i = 0; i < num_samples_; ++i) order_[i] = i;
      for (int64_t i = num_samples_ - 1; i > 0; --i) {
        int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
        std::swap(order_[i], order_[j]);
      }
    }
    cached_epoch_ = epoch;
  }
  return permutation_ ? (*permutation_)(index) : order_[static_cast<size_t>(index)];
}

std::vector<int64_t> GlobalSampler::GlobalBatch(int64_t consumed_samples, int global_batch_size) {
  std::vector<int64_t> batch;
  if (num_samples_ == 0 || global_batch_size <= 0 || consumed_samples < 0) return batch;
  batch.reserve(static_cast<size_t>(global_batch_size));
  int64_t position = consumed_samples;
  while (static_cast<int>(batch.size()) < global_batch_size) {
    const int64_t epoch = EpochOf(position);
    batch.push_back(plan_.SampleAt(epoch, OrderAt(epoch, position % num_samples_)));
    ++position;
  }
  return batch;
}

std::vector<int64_t> GlobalSampler::DpSlice(const std::vector<int64_t>& global_batch, int dp_rank,
                                            int dp_size) {
  if (dp_size <= 0 || dp_rank < 0 || dp_rank >= dp_size) return {};
  const int64_t n = static_cast<int64_t>(global_batch.size());
  const int64_t begin = n * dp_rank / dp_size;
  const int64_t end = n * (dp_rank + 1) / dp_size;
  return std::vector<int64_t>(global_batch.begin() + begin, global_batch.begin() + end);
}

std::vector<int64_t> ValidationBatch(int64_t index, int batch_size, int64_t num_samples) {
  std::vector<int64_t> batch;
  if (num_samples <= 0 || batch_size <= 0 || index < 0) return batch;
  batch.reserve(static_cast<size_t>(batch_size));
  const int64_t start = (index % num_samples) * (batch_size % num_samples) % num_samples;
  for (int j = 0; j < batch_size; ++j) batch.push_back((start + j) % num_samples);
  return batch;
}

}  // namespace trainer
