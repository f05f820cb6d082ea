// Added tokens matched as Hugging Face tokenizers does (see hf_added_tokens.h).
#include "data/hf_added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "data/gpt2_pieces.h"

namespace trainer {
namespace {

constexpr int32_t kCutOff = -2;  // a character cut off by the end of the text so far
constexpr int32_t kInvalid = -3;

// The code point at text[at] and its byte length; length 0 at the end of the text.
int32_t CodePointAt(const std::string& text, size_t at, size_t* length) {
  *length = 0;
  if (at >= text.size()) return -1;
  const auto lead = static_cast<uint8_t>(text[at]);
  const size_t need = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  if (text.size() - at < need) {
    *length = text.size() - at;
    return kCutOff;
  }
  utf8proc_int32_t c = -1;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + at, need, &c);
  *length = n > 0 ? static_cast<size_t>(n) : 1;
  return n > 0 ? c : kInvalid;
}

// The code point that ends at text[at] (at > 0), *begin where it starts.
int32_t CodePointBefore(const std::string& text, size_t at, size_t* begin) {
  *begin = at - 1;
  while (*begin > 0 && at - *begin < 4 && (static_cast<uint8_t>(text[*begin]) & 0xC0) == 0x80)
    --*begin;
  size_t length = 0;
  const int32_t c = CodePointAt(text, *begin, &length);
  if (*begin + length == at) return c;
  *begin = at - 1;
  return kInvalid;
}

// Unicode's White_Space (gpt2_pieces.h), false for the markers below 0 (no character).
bool IsSpace(int32_t c) {
  return c >= 0 && IsWhiteSpace(static_cast<uint32_t>(c));
}

// What \w matches in a Unicode regex: Alphabetic, marks, decimal digits, connector punctuation
// and the join controls.
bool IsWordCharacter(int32_t c) {
  if (c < 0) return false;
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  // The Alphabetic symbols: circled and squared Latin letters.
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
      (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// Where the run of white space that ends at text[at] starts (not before `floor`).
size_t SpaceRunStart(const std::string& text, size_t at, size_t floor) {
  while (at > floor) {
    size_t begin = 0;
    if (!IsSpace(CodePointBefore(text, at, &begin))) break;
    at = begin;
  }
  return std::max(at, floor);
}

}  // namespace

void HfAddedText::Drop() {
  size_t drop = std::min(offset, search);
  while (drop > 0 && (static_cast<uint8_t>(text[drop]) & 0xC0) == 0x80) --drop;  // a whole one
  if (drop == 0) return;
  size_t begin = 0;
  before = CodePointBefore(text, drop, &begin);
  text.erase(0, drop);
  offset -= drop;
  search -= drop;
}

void HfAddedSet::Add(HfAddedToken token) {
  if (token.content.empty()) return;
  longest_ = std::max(longest_, token.content.size());
  any_lstrip_ = any_lstrip_ || token.lstrip;
  tokens_.push_back(std::move(token));
}

void HfAddedSet::Finish() {
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const auto& a, const auto& b) {
    return a.content.size() > b.content.size();
  });
  by_byte_.assign(256, {});
  for (size_t i = 0; i < tokens_.size(); ++i)
    by_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(static_cast<uint32_t>(i));
}

const HfAddedToken* HfAddedSet::Find(const std::string& text, size_t from, size_t limit,
                                     size_t* at) const {
  if (tokens_.empty()) return nullptr;
  for (size_t i = from; i < limit; ++i) {
    for (const uint32_t c : by_byte_[static_cast<uint8_t>(text[i])]) {
      if (text.compare(i, tokens_[c].content.size(), tokens_[c].content) == 0) {
        *at = i;
        return &tokens_[c];
      }
    }
  }
  return nullptr;
}

bool HfAddedSet::Next(HfAddedText* t, bool final, Match* match, size_t* safe) const {
  const std::string& text = t->text;
  const size_t size = text.size();
  // A token starting before `limit` is whole in the text.
  const size_t hold = final || longest_ == 0 ? 0 : longest_ - 1;
  const size_t limit = size > hold ? size - hold : 0;
  size_t edge = limit;   // text from here on may still belong to a token
  bool waiting = false;  // a token at `edge` needs later text to be decided
  size_t at = 0;
  while (const HfAddedToken* token = Find(text, t->search, limit, &at)) {
    const size_t end = at + token->content.size();
    size_t length = 0;
    const int32_t after = CodePointAt(text, end, &length);
    if (token->single_word) {
      if (!final && (length == 0 || after == kCutOff)) {
        waiting = true;
        break;
      }
      size_t begin = 0;
      const int32_t previous = at > 0 ? CodePointBefore(text, at, &begin) : t->before;
      if (IsWordCharacter(previous) || IsWordCharacter(after)) {  // not a word of its own
        t->search = end;
        continue;
      }
    }
    const size_t begin = token->lstrip ? SpaceRunStart(text, at, t->offset) : at;
    size_t stop = end;
    int32_t c = after;
    while (token->rstrip && length > 0 && IsSpace(c)) {
      stop += length;
      c = CodePointAt(text, stop, &length);
    }
    if (token->rstrip && !final && (length == 0 || c == kCutOff)) {
      waiting = true;
      break;
    }
    match->text_begin = t->offset;
    match->text_end = std::max(t->offset, begin);
    match->id = token->id;
    t->offset = stop;
    t->search = end;
    return true;
  }
  if (final) {
    *safe = size;
    return false;
  }
  if (waiting) {
    edge = at;
  } else {
    t->search = std::max(t->search, limit);
  }
  while (edge > t->offset && (static_cast<uint8_t>(text[edge]) & 0xC0) == 0x80) --edge;
  // White space at the end may go with an lstrip token that follows.
  if (any_lstrip_) edge = SpaceRunStart(text, edge, t->offset);
  *safe = std::max(edge, t->offset);
  return false;
}

}  // namespace trainer
