// DrawToken: the next token of `trainer sample` from one position's logits. Temperature 0 takes
// the likeliest token (the lowest id among equals); otherwise a draw from the softmax of
// logits / temperature over the top_k likeliest tokens (0: all of them).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace trainer {

int32_t DrawToken(const std::vector<float>& logits, double temperature, int top_k,
                  std::mt19937_64* rng);

}  // namespace trainer
