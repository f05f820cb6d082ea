// Small string helpers shared by file-name and message handling.
#pragma once

#include <string>

namespace trainer {

// Whether `text` ends with `end` (any text ends with "").
inline bool EndsWith(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

// "1 rank", "4 ranks": a count and its word, plural unless the count is 1.
inline std::string Plural(long long n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace trainer
