// GPT-2's pre-tokenizer (see gpt2_pieces.h): UTF-8 decoding, Unicode classes, the pattern's
// pieces as a scan over characters.
#include "data/gpt2_pieces.h"

#include <algorithm>

namespace trainer {
namespace {

struct CodePointRange {
  uint32_t first, last;
};
#include "data/unicode_class_ranges.inc"

template <size_t N>
bool InRanges(const CodePointRange (&ranges)[N], uint32_t code_point) {
  const CodePointRange* end = ranges + N;
  const CodePointRange* it = std::upper_bound(
      ranges, end, code_point, [](uint32_t c, const CodePointRange& r) { return c < r.first; });
  return it != ranges && code_point <= (it - 1)->last;
}

// The number of bytes a UTF-8 lead byte announces, 0 for a byte that cannot start a character.
int Utf8Length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool IsContinuation(uint8_t b) {
  return (b & 0xC0) == 0x80;
}

// The characters of text, read one at a time.
class CharCursor {
 public:
  CharCursor(const uint8_t* text, size_t size) : text_(text), size_(size) {}
  bool AtEnd(size_t at) const { return at >= size_; }
  Utf8Char At(size_t at) const { return DecodeUtf8Char(text_ + at, size_ - at); }
  // The end of the run of characters of class cls that starts at `at`.
  size_t RunEnd(size_t at, CharClass cls) const {
    while (!AtEnd(at)) {
      const Utf8Char c = At(at);
      if (c.cls != cls) break;
      at += c.bytes;
    }
    return at;
  }
  uint8_t Byte(size_t at) const { return AtEnd(at) ? 0 : text_[at]; }

 private:
  const uint8_t* text_;
  size_t size_;
};

// 's 't 're 've 'm 'll 'd at `at` (which holds an apostrophe): the contraction's length, or 0.
size_t ContractionLength(const CharCursor& text, size_t at) {
  const uint8_t a = text.Byte(at + 1), b = text.Byte(at + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The end of the piece that starts at `at`.
size_t PieceEnd(const CharCursor& text, size_t at) {
  const Utf8Char c = text.At(at);
  if (c.code_point == '\'') {
    const size_t contraction = ContractionLength(text, at);
    if (contraction > 0) return at + contraction;
  }
  // ' ?\p{L}+', ' ?\p{N}+' and ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  size_t run_start = at;
  CharClass run_class = c.cls;
  if (c.code_point == ' ' && !text.AtEnd(at + 1) && text.At(at + 1).cls != CharClass::kSpace) {
    run_start = at + 1;
    run_class = text.At(run_start).cls;
  }
  if (run_class != CharClass::kSpace) return text.RunEnd(run_start, run_class);
  // '\s+(?!\S)': the spaces up to, not including, the last one before a non-space; at the end
  // of the text all of them. '\s+': a single space before a non-space.
  const size_t run_end = text.RunEnd(at, CharClass::kSpace);
  if (text.AtEnd(run_end)) return run_end;
  size_t last = at;  // the start of the run's last character
  for (size_t i = at; i < run_end; i += text.At(i).bytes) last = i;
  return last > at ? last : run_end;
}

}  // namespace

bool IsWhiteSpace(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

CharClass ClassOfCodePoint(uint32_t code_point) {
  if (code_point < 0x80) {  // ASCII without the tables
    if ((code_point | 0x20) >= 'a' && (code_point | 0x20) <= 'z') return CharClass::kLetter;
    if (code_point >= '0' && code_point <= '9') return CharClass::kNumber;
    return IsWhiteSpace(code_point) ? CharClass::kSpace : CharClass::kOther;
  }
  if (IsWhiteSpace(code_point)) return CharClass::kSpace;
  if (InRanges(kLetterRanges, code_point)) return CharClass::kLetter;
  if (InRanges(kNumberRanges, code_point)) return CharClass::kNumber;
  return CharClass::kOther;
}

Utf8Char DecodeUtf8Char(const uint8_t* text, size_t size) {
  constexpr Utf8Char kInvalid = {1, 0xFFFFFFFFu, CharClass::kOther};
  const uint8_t lead = text[0];
  const int length = Utf8Length(lead);
  if (length == 1) return {1, lead, ClassOfCodePoint(lead)};
  if (length == 0 || size < static_cast<size_t>(length)) return kInvalid;
  uint32_t code_point = lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    if (!IsContinuation(text[i])) return kInvalid;
    code_point = (code_point << 6) | (text[i] & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  static constexpr uint32_t kSmallest[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (code_point < kSmallest[length] || (code_point >= 0xD800 && code_point <= 0xDFFF) ||
      code_point > 0x10FFFF)
    return kInvalid;
  return {length, code_point, ClassOfCodePoint(code_point)};
}

void SplitGpt2Pieces(const uint8_t* text, size_t size, std::vector<size_t>* piece_ends) {
  const CharCursor cursor(text, size);
  for (size_t at = 0; at < size;) {
    at = PieceEnd(cursor, at);
    piece_ends->push_back(at);
  }
}

size_t FinalPiecesLimit(size_t size) {
  // A character is at most 4 bytes, so the last 12 bytes hold at least three characters.
  return size > 12 ? size - 12 : 0;
}

}  // namespace trainer
