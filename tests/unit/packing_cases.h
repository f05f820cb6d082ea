// Packed (B,T) batches (Data.packing: documents) for tests, built from each sample's document
// lengths, so that what is computed from doc_starts can be checked against the lengths.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace trainer {
namespace testing {

// A packed (B,T) batch given by each sample's document lengths (summing to T).
struct Packing {
  int B = 0, T = 0;
  std::vector<std::vector<int>> lengths;  // per sample
  std::vector<int32_t> doc_starts;        // (B,T), as the data loader writes them

  Packing(int T_, std::vector<std::vector<int>> per_sample)
      : B(static_cast<int>(per_sample.size())), T(T_), lengths(std::move(per_sample)) {
    for (const std::vector<int>& sample : lengths) {
      int t = 0;
      for (int length : sample) {
        for (int i = 0; i < length; ++i) doc_starts.push_back(t);
        t += length;
      }
      EXPECT_EQ(t, T) << "a case's lengths must fill the sample";
    }
  }
  int count() const {
    int n = 0;
    for (const auto& sample : lengths) n += static_cast<int>(sample.size());
    return n;
  }
  int longest() const {
    int n = 0;
    for (const auto& sample : lengths)
      n = std::max(n, *std::max_element(sample.begin(), sample.end()));
    return n;
  }
};

// Random lengths: documents of 1..max_length tokens until the sample is full.
inline Packing RandomPacking(int B, int T, int max_length, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int>> lengths(B);
  for (auto& sample : lengths) {
    int left = T;
    while (left > 0) {
      const int length = std::min(left, 1 + static_cast<int>(rng() % max_length));
      sample.push_back(length);
      left -= length;
    }
  }
  return Packing(T, lengths);
}

}  // namespace testing
}  // namespace trainer
