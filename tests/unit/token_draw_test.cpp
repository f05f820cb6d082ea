// DrawToken against closed-form answers: the likeliest token at temperature 0 and with top-k 1,
// and the frequencies of 40000 draws against the softmax of logits / temperature over the top k
// (computed here, independently), within 4 standard deviations of a binomial count. ReplyStream
// against replies whose end marker comes whole, split over tokens, inside a token, or never.
#include "cli/token_draw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace trainer {
namespace {

TEST(TokenDraw, TemperatureZeroTakesTheLikeliestLowestIdAmongEquals) {
  std::mt19937_64 rng(1);
  EXPECT_EQ(DrawToken({0.5f, 3.f, -1.f, 2.9f}, 0.0, 0, &rng), 1);
  EXPECT_EQ(DrawToken({1.f, 4.f, 4.f, 2.f}, 0.0, 0, &rng), 1);
  EXPECT_EQ(DrawToken({7.f}, 0.0, 0, &rng), 0);
}

TEST(TokenDraw, TopOneIsGreedyAtAnyTemperature) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(DrawToken({0.1f, 0.2f, 0.3f, 0.25f}, 5.0, 1, &rng), 2);
}

// Softmax of logits / temperature over the k largest (all when k == 0), zero elsewhere.
std::vector<double> Expected(const std::vector<float>& logits, double temperature, int k) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const size_t keep = k > 0 ? std::min<size_t>(k, logits.size()) : logits.size();
  std::vector<double> p(logits.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[order[i]] = std::exp(logits[order[i]] / temperature);
  for (double& v : p) v /= total;
  return p;
}

TEST(TokenDraw, FrequenciesFollowTheSoftmaxOverTheTopK) {
  const std::vector<float> logits = {2.f, 1.f, 0.f, -1.f, 0.5f};
  const int draws = 40000;
  for (const auto& [temperature, k] :
       std::vector<std::pair<double, int>>{{1.0, 0}, {1.0, 2}, {2.0, 0}, {0.5, 3}, {1.0, 100}}) {
    std::mt19937_64 rng(7);
    std::vector<int> count(logits.size(), 0);
    for (int i = 0; i < draws; ++i) ++count[DrawToken(logits, temperature, k, &rng)];
    const std::vector<double> p = Expected(logits, temperature, k);
    for (size_t t = 0; t < logits.size(); ++t) {
      const double sd = std::sqrt(draws * p[t] * (1 - p[t]));
      EXPECT_LE(std::abs(count[t] - draws * p[t]), 4 * sd + 1e-9)
          << "token " << t << " at temperature " << temperature << ", top-k " << k << ": "
          << count[t] << " draws, expected " << draws * p[t];
    }
  }
}

// Feeds `pieces` (a token's text each) until the reply ends; returns what was printed after each.
std::vector<std::string> Stream(const std::string& end, const std::vector<std::string>& pieces,
                                size_t* taken) {
  std::ostringstream out;
  ReplyStream reply(end, &out);
  std::vector<std::string> printed;
  *taken = 0;
  bool more = true;
  for (const std::string& piece : pieces) {
    if (!more) break;
    more = reply.Add(piece);
    ++*taken;
    printed.push_back(out.str());
  }
  reply.Finish();
  printed.push_back(out.str());
  return printed;
}

TEST(ReplyStream, PrintsUpToTheEndMarkerHoldingBackWhatMayStartIt) {
  size_t taken = 0;
  // The marker split over three tokens: "<|im" is held back until "_end|>" completes it.
  EXPECT_EQ(
      Stream("<|im_end|>", {"3 is", " 7.", "<|im", "_en", "d|>", "more"}, &taken),
      (std::vector<std::string>{"3 is", "3 is 7.", "3 is 7.", "3 is 7.", "3 is 7.", "3 is 7."}));
  EXPECT_EQ(taken, 5u);
  // A marker inside a token's text, and text after it in the same token.
  EXPECT_EQ(Stream("\n", {"ab", "c\nd", "e"}, &taken),
            (std::vector<std::string>{"ab", "abc", "abc"}));
  EXPECT_EQ(taken, 2u);
  // A "<|" that turns out not to start the marker is printed once the next token shows it.
  EXPECT_EQ(Stream("<|eot_id|>", {"a <|", "b"}, &taken),
            (std::vector<std::string>{"a ", "a <|b", "a <|b"}));
  // No marker: Finish prints the held-back tail.
  const std::vector<std::string> cut = Stream("<|im_end|>", {"no end", "<|im"}, &taken);
  EXPECT_EQ(cut[1], "no end");
  EXPECT_EQ(cut.back(), "no end<|im");
  EXPECT_EQ(taken, 2u);
  // The marker first: an empty reply.
  EXPECT_EQ(Stream("<|im_end|>", {"<|im_end|>", "x"}, &taken).back(), "");
}

}  // namespace
}  // namespace trainer
