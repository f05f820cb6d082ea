// Small string tests shared by file-name and message handling.
#pragma once

#include <string>

namespace trainer {

// Whether `text` ends with `end` (any text ends with "").
inline bool EndsWith(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace trainer
