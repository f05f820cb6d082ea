// DrawToken and ReplyStream (token_draw.h).
#include "cli/token_draw.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace trainer {

int32_t DrawToken(const std::vector<float>& logits, double temperature, int top_k,
                  std::mt19937_64* rng) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto likelier = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (temperature <= 0) return *std::min_element(order.begin(), order.end(), likelier);
  const size_t k = top_k > 0 ? std::min<size_t>(top_k, order.size()) : order.size();
  std::partial_sort(order.begin(), order.begin() + k, order.end(), likelier);
  std::vector<double> weights(k);  // relative to the likeliest, so that exp cannot overflow
  for (size_t i = 0; i < k; ++i)
    weights[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  return order[pick(*rng)];
}

bool ReplyStream::Add(const std::string& text) {
  reply_ += text;
  const size_t end = reply_.find(end_);
  ended_ = end != std::string::npos;
  if (ended_) {
    Print(end);
    return false;
  }
  // Held back: the longest tail that begins the end marker.
  size_t held = std::min(reply_.size(), end_.size() - 1);
  while (held > 0 && reply_.compare(reply_.size() - held, held, end_, 0, held) != 0) --held;
  Print(reply_.size() - held);
  return true;
}

void ReplyStream::Finish() {
  if (!ended_) Print(reply_.size());
}

void ReplyStream::Print(size_t upto) {
  if (upto <= printed_) return;
  *out_ << reply_.substr(printed_, upto - printed_);
  out_->flush();
  printed_ = upto;
}

}  // namespace trainer
