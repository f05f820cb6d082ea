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

GlobalSampler::GlobalSampler(int64_t num_samples, uint64_t seed, EpochPlan plan)
    : num_samples_(plan.empty() ? (num_samples < 0 ? 0 : num_samples) : plan.places()),
      seed_(seed),
      plan_(std::move(plan)) {}

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

const std::vector<int64_t>& GlobalSampler::EpochOrder(int64_t epoch) {
  if (epoch == cached_epoch_) return order_;
  // Seed and epoch pass through the mixer separately so that nearby seeds and epochs give
  // unrelated streams.
  SplitMix64 seed_mixer(seed_);
  SplitMix64 epoch_mixer(static_cast<uint64_t>(epoch) ^ 0x5851f42d4c957f2dULL);
  SplitMix64 rng(seed_mixer.Next() ^ epoch_mixer.Next());
  order_.resize(static_cast<size_t>(num_samples_));
  for (int64_t i = 0; i < num_samples_; ++i) order_[i] = i;
  for (int64_t i = num_samples_ - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order_[i], order_[j]);
  }
  cached_epoch_ = epoch;
  return order_;
}

std::vector<int64_t> GlobalSampler::GlobalBatch(int64_t consumed_samples, int global_batch_size) {
  std::vector<int64_t> batch;
  if (num_samples_ == 0 || global_batch_size <= 0 || consumed_samples < 0) return batch;
  batch.reserve(static_cast<size_t>(global_batch_size));
  int64_t position = consumed_samples;
  while (static_cast<int>(batch.size()) < global_batch_size) {
    const std::vector<int64_t>& order = EpochOrder(EpochOf(position));
    int64_t index = position % num_samples_;
    batch.push_back(plan_.SampleAt(EpochOf(position), order[static_cast<size_t>(index)]));
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
