// `trainer sample`'s output. DrawToken: the next token from one position's logits. Temperature 0
// takes the likeliest token (the lowest id among equals); otherwise a draw from the softmax of
// logits / temperature over the top_k likeliest tokens (0: all of them). ReplyStream: a chat
// reply (--chat) printed as it grows, up to the text that ends it.
#pragma once

#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace trainer {

int32_t DrawToken(const std::vector<float>& logits, double temperature, int top_k,
                  std::mt19937_64* rng);

// A chat reply, printed as it grows up to the text that ends it (not printed; not empty): a tail
// that begins that text waits for the next token.
class ReplyStream {
 public:
  ReplyStream(std::string end, std::ostream* out) : end_(std::move(end)), out_(out) {}
  // Adds a token's text; false once the reply has ended.
  bool Add(const std::string& text);
  // The reply cut by --tokens or the end of document: prints what was held back.
  void Finish();

 private:
  void Print(size_t upto);
  std::string end_, reply_;
  std::ostream* out_;
  size_t printed_ = 0;
  bool ended_ = false;
};

}  // namespace trainer
