// Unicode text handling after Hugging Face `tokenizers` (see unicode_text.h).
#include "data/unicode_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace trainer {
namespace {

// U+11A7 (HANGUL JUNGSEONG O-YAE) in UTF-8. utf8proc before 2.9 takes it for the trailing
// consonant of index 0 and composes it into a preceding LV syllable, dropping it; NFC keeps it.
// It is a starter that composes with nothing before it, so text split in front of it
// normalizes piece by piece to the same NFC.
const char kJungseongOYae[] = "\xE1\x86\xA7";

void AppendNfcPiece(const char* text, size_t size, std::string* out) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text);
  utf8proc_uint8_t* normalized = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(bytes, static_cast<utf8proc_ssize_t>(size), &normalized,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n >= 0)
    out->append(reinterpret_cast<const char*>(normalized), static_cast<size_t>(n));
  else
    out->append(text, size);
  std::free(normalized);
}

// Unicode's White_Space characters (\t \n \v \f \r, NEL, the line and paragraph separators, and
// the space separators Zs), as a class body.
const char kWhiteSpace[] = R"(\x{9}-\x{D}\x{85}\x{2028}\x{2029}\p{Zs})";

}  // namespace

void AppendNfc(const char* text, size_t size, std::string* out) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(text);
  if (std::all_of(bytes, bytes + size, [](uint8_t b) { return b < 0x80; })) {
    out->append(text, size);
    return;
  }
  const std::string_view view(text, size);
  size_t piece = 0;
  for (size_t at = view.find(kJungseongOYae, 1); at != std::string_view::npos;
       at = view.find(kJungseongOYae, at + 1)) {
    AppendNfcPiece(text + piece, at - piece, out);
    piece = at;
  }
  AppendNfcPiece(text + piece, size - piece, out);
}

std::string WithUnicodeWhiteSpace(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's')
        out += in_class ? kWhiteSpace : std::string("[") + kWhiteSpace + "]";
      else if (next == 'S' && !in_class)
        out += std::string("[^") + kWhiteSpace + "]";
      else
        out += {c, next};  // \S inside a class stays PCRE2's (no tokenizer pattern has it)
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace trainer
