// The added tokens of a Hugging Face tokenizer.json ("added_tokens"), matched as the `tokenizers`
// library's AddedVocabulary matches them, over text that arrives in parts (hf_tokenizer.h):
//   normalized false  matched in the raw text first; the text between them is normalized apart
//   normalized true   then matched in each such normalized part, the token's content normalized
//   (both)            leftmost first, the longest there; a search goes on after a match's end
//   single_word       kept only with no word character (\w as Unicode regexes have it: letters,
//                     marks, digits, connector punctuation, ZWJ/ZWNJ) on either side in its part
//   lstrip, rstrip    the whitespace (Unicode's White_Space) on its left or right goes with it
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

struct HfAddedToken {
  std::string content;  // as matched (a normalized token's content normalized)
  uint32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false;
};

// One text that tokenizers searches for added tokens as a whole (the raw document, or one
// normalized part of it), held from the first byte not yet passed on.
struct HfAddedText {
  std::string text;
  size_t offset = 0;    // text before it is passed on, or stripped by a token
  size_t search = 0;    // where the search for the next token goes on
  int32_t before = -1;  // the code point before text[0]; -1 at the start

  void Reset() {
    text.clear();
    offset = search = 0;
    before = -1;
  }
  // Drops the characters before min(offset, search).
  void Drop();
};

// The tokens matched in one kind of text (raw or normalized).
class HfAddedSet {
 public:
  void Add(HfAddedToken token);
  // Sorts the tokens, longest first, and indexes them by first byte. Call once all are added.
  void Finish();

  struct Match {
    size_t text_begin, text_end;  // the text before the token, in HfAddedText::text
    uint32_t id;
  };
  // The next token in `text` (tokenizers' find_matches), *match the text before it; moves
  // text->offset past the token. Without `final` (more text may follow) it stops where later
  // text could change the outcome. False when no token follows: then *safe is where the text
  // that cannot belong to a token ends (text->text's size when final).
  bool Next(HfAddedText* text, bool final, Match* match, size_t* safe) const;

 private:
  // The leftmost token starting in text[from, limit), the longest there.
  const HfAddedToken* Find(const std::string& text, size_t from, size_t limit, size_t* at) const;

  std::vector<HfAddedToken> tokens_;            // longest first
  std::vector<std::vector<uint32_t>> by_byte_;  // first byte -> indices into tokens_
  size_t longest_ = 0;
  bool any_lstrip_ = false;
};

}  // namespace trainer
