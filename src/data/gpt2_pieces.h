// GPT-2's pre-tokenizer: text -> the pieces that byte-level BPE then encodes one by one. The pieces
// are the matches, left to right, of GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// over UTF-8 text, with Unicode's letters (\p{L}), numbers (\p{N}) and White_Space (\s). Bytes that
// are not valid UTF-8 count as one character each, neither letter, number nor space, so any bytes
// split into pieces that cover them exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainer {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// Unicode's White_Space property (what \s matches in Unicode regexes).
bool IsWhiteSpace(uint32_t code_point);
// The class of a Unicode code point (the tables in unicode_class_ranges.inc).
CharClass ClassOfCodePoint(uint32_t code_point);

// One character of UTF-8 text at text[0..size): its byte length (1..4; 1 for an invalid byte)
// and class. size must be > 0.
struct Utf8Char {
  int bytes;
  uint32_t code_point;  // 0xFFFFFFFF for an invalid byte
  CharClass cls;
};
Utf8Char DecodeUtf8Char(const uint8_t* text, size_t size);

// Appends the end offset of each piece of text[0..size) to piece_ends, in order (the last is
// size; nothing for empty text).
void SplitGpt2Pieces(const uint8_t* text, size_t size, std::vector<size_t>* piece_ends);

// The offset up to which pieces are final whatever text follows: a piece decides its extent from
// at most the character after it and, for the contractions, two characters after its start. So
// the pieces of text[0..size) that end at or before the limit, which leaves three characters or
// more after it, stay as they are.
size_t FinalPiecesLimit(size_t size);

}  // namespace trainer
