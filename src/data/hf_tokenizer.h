// Hugging Face byte-level BPE from a tokenizer.json (`trainer pack --tokenizer hf`), as
// Qwen2/2.5/3, Llama-3, SmolLM2 and GPT-2 save it. The file is read with nlohmann-json; its
// parts, in the order Hugging Face tokenizers applies them:
//   added_tokens   special or not, matched before the pre-tokenizer as tokenizers does, with
//                  their flags normalized, single_word, lstrip and rstrip (hf_added_tokens.h); the
//                  text between them is encoded apart
//   normalizer     none, NFC (utf8proc) or a Sequence of those
//   pre_tokenizer  ByteLevel with use_regex (GPT-2's pattern), or a Sequence of Split (a Regex or
//                  String pattern, behavior Isolated, invert false) and ByteLevel without
//                  use_regex; the pattern is compiled by PCRE2 with JIT, UTF and UCP. A Digits
//                  (individual or runs) may come first (StarCoder, SmolLM2). A ByteLevel step is
//                  required: the vocabulary is of byte-mapped text
//   model          BPE with vocab, merges ("a b" strings or ["a", "b"] pairs), ignore_merges; no
//                  byte_fallback (that is SentencePiece's style: --tokenizer sentencepiece), no
//                  continuing_subword_prefix, end_of_word_suffix or dropout
//   post_processor TemplateProcessing (alone or in a Sequence with ByteLevel): its special tokens
//                  before and after $A start and end each document (Llama-3's <|begin_of_text|>)
// The end-of-document id is the first of <|endoftext|>, <|end_of_text|>, tokenizer_config.json's
// eos_token and </s> that the tokenizer has, unless --eod-id says another.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "data/hf_added_tokens.h"
#include "data/tokenizer.h"

namespace trainer {

struct HfModel;  // the loaded tokenizer.json (hf_tokenizer.cpp)

class HfTokenizer final : public Tokenizer {
 public:
  // dir/tokenizer.json (and dir/tokenizer_config.json when there); `flag` names the option in
  // messages. eod_id -1: the tokenizer's own (see above).
  static StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& dir,
                                                     const std::string& flag, int64_t eod_id);
  // The same from the text of a tokenizer.json (`source` names it in errors).
  static StatusOr<std::unique_ptr<HfTokenizer>> FromJson(const std::string& json,
                                                         const std::string& source, int64_t eod_id,
                                                         const std::string& eos_token = "");
  ~HfTokenizer() override;

  std::string name() const override { return "hf"; }
  int64_t vocab_size() const override;
  int64_t eod_id() const override { return eod_id_; }
  void BeginDocument(const std::string&) override;
  // Encodes what later bytes cannot change; the rest waits.
  Status Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) override;
  Status EndDocument(std::vector<uint32_t>* tokens) override;

  // The tokens of a whole text as Hugging Face's encode(text) gives them (with the template's
  // special tokens, without the end-of-document token).
  std::vector<uint32_t> EncodeText(const std::string& text);
  // A prompt: the text's tokens after the template's leading tokens (Llama-3's <|begin_of_text|>)
  // and without its trailing ones, so that a model continues it (`trainer sample`).
  std::vector<uint32_t> EncodePrompt(const std::string& text);
  // The text token `id` stands for: an added token's content, or the bytes of a model token; ""
  // past the tokenizer's vocabulary (a model's padding rows).
  std::string Decode(uint32_t id) const;
  // The id of a token (added or of the vocabulary) by its text; -1 where it has none.
  int64_t TokenId(const std::string& token) const;

 private:
  HfTokenizer(std::shared_ptr<const HfModel> model, int64_t eod_id);
  // Encodes the raw bytes of raw_ up to where later bytes cannot change them (all at the end):
  // splits them at the added tokens matched in raw text, normalizing the text between into
  // normalized_.
  void Process(bool document_end, std::vector<uint32_t>* tokens);
  void AppendNormalized(const char* text, size_t size);
  // Splits normalized_ at the normalized added tokens and pre-tokenizes the text between; final:
  // the text before a raw added token (or the document's end) is all there.
  void SplitNormalized(bool final, std::vector<uint32_t>* tokens);
  // Pre-tokenizes and encodes text; with final false only the pieces later text cannot change.
  // Returns the bytes encoded.
  size_t PreTokenize(const char* text, size_t size, bool final, std::vector<uint32_t>* tokens);
  // PreTokenize's pattern alone (after Digits, where there is one).
  size_t SplitPattern(const char* text, size_t size, bool final, std::vector<uint32_t>* tokens);
  void EncodePiece(const char* piece, size_t size, std::vector<uint32_t>* tokens);

  std::shared_ptr<const HfModel> model_;
  int64_t eod_id_;
  void* match_data_ = nullptr;  // pcre2_match_data_8
  bool document_started_ = false;
  HfAddedText raw_;         // raw bytes not yet normalized
  HfAddedText normalized_;  // normalized text not yet pre-tokenized
  std::string scratch_;
  std::unordered_map<std::string, std::vector<uint32_t>> cache_;  // piece -> its tokens
};

// `trainer pack --tokenizer hf`: dir/tokenizer.json; vocab_size 0 or the tokenizer's. A folder
// with a tokenizer.model whose tokenizer.json is missing or not byte-level BPE gets
// SentencePieceTokenizer (sentencepiece_tokenizer.h).
StatusOr<std::unique_ptr<Tokenizer>> MakeHfTokenizer(const std::string& dir,
                                                     const std::string& flag, int64_t vocab_size,
                                                     int64_t eod_id);

}  // namespace trainer
