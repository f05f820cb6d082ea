// GPT-2's byte-level BPE: BpeVocabulary (the vocabulary and merge ranks of a GPT-2 tokenizer's
// files: Hugging Face's vocab.json + merges.txt, or OpenAI's encoder.json + vocab.bpe) and
// BpeTokenizer, the streaming Tokenizer of `trainer pack --tokenizer gpt2`. Text is cut into
// GPT-2's pieces (gpt2_pieces.h); each piece starts as one token per byte, and the adjacent pair
// of lowest merge rank is merged, the leftmost first, until no pair has a rank (Hugging Face
// tokenizers' order; GPT-2's encoder gives the same for merges learned in order). As in
// transformers' GPT-2 tokenizer, <|endoftext|> written in the text is that token (the text on
// either side encoded apart), where the vocabulary has it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "data/tokenizer.h"

namespace trainer {

class BpeVocabulary {
 public:
  // dir/vocab.json and dir/merges.txt, else dir/encoder.json and dir/vocab.bpe. Missing files are
  // a usage error naming `flag`; malformed ones a data error naming the file and entry.
  static StatusOr<std::shared_ptr<const BpeVocabulary>> Load(const std::string& dir,
                                                             const std::string& flag);

  // A vocabulary from in-memory entries (a Hugging Face tokenizer.json's model): each token in
  // GPT-2's byte spelling with its id, and the merges in rank order as (left, right) tokens.
  // `source` names the file in errors. Tokens whose bytes repeat an earlier one's (a special token
  // spelled like a plain one) keep the first id for Find.
  static StatusOr<std::shared_ptr<const BpeVocabulary>> FromEntries(
      const std::vector<std::pair<std::string, int64_t>>& vocabulary,
      const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source);

  int64_t size() const { return static_cast<int64_t>(token_bytes_.size()); }  // max id + 1
  // The id of the token whose bytes are `bytes` (e.g. "<|endoftext|>"), or -1.
  int64_t Find(const std::string& bytes) const;
  // The bytes a token stands for (empty for an id the vocabulary skips).
  const std::string& TokenBytes(uint32_t id) const { return token_bytes_[id]; }
  // Appends the tokens of one piece.
  void EncodePiece(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) const;
  // The two files, vocabulary first.
  const std::string& vocabulary_path() const { return vocabulary_path_; }
  const std::string& merges_path() const { return merges_path_; }

 private:
  struct Merge {
    uint32_t rank, merged;
  };
  static constexpr uint32_t kMerged = 0xFFFFFFFFu;  // a symbol merged into the one on its left
  static uint64_t PairKey(uint32_t left, uint32_t right) {
    return (static_cast<uint64_t>(left) << 32) | right;
  }
  Status ReadVocabulary(const std::string& path);
  Status ReadMerges(const std::string& path);
  Status AddTokens(const std::vector<std::pair<std::string, int64_t>>& entries,
                   const std::string& path, bool allow_repeated_bytes);
  // `where(i)` names entry i in errors (e.g. "line 3").
  Status AddMerge(const std::string& left_entry, const std::string& right_entry, uint32_t rank,
                  const std::string& path, const std::string& where);

  std::vector<std::string> token_bytes_;  // by id
  std::unordered_map<std::string, uint32_t> ids_;
  uint32_t byte_ids_[256] = {};
  std::unordered_map<uint64_t, Merge> merges_;
  std::string vocabulary_path_, merges_path_;
};

class BpeTokenizer final : public Tokenizer {
 public:
  static inline const std::string kEndOfText = "<|endoftext|>";

  BpeTokenizer(std::shared_ptr<const BpeVocabulary> vocabulary, int64_t eod_id)
      : vocabulary_(std::move(vocabulary)),
        eod_id_(eod_id),
        end_of_text_id_(vocabulary_->Find(kEndOfText)) {}

  std::string name() const override { return "gpt2"; }
  int64_t vocab_size() const override { return vocabulary_->size(); }
  int64_t eod_id() const override { return eod_id_; }
  void BeginDocument(const std::string&) override { pending_.clear(); }
  // Encodes the pieces that later bytes cannot change; the rest waits in pending_.
  Status Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) override;
  Status EndDocument(std::vector<uint32_t>* tokens) override;

  // The tokens of a whole text (one document, no end-of-document token).
  std::vector<uint32_t> EncodeText(const std::string& text);

 private:
  // Encodes what of pending_ later bytes cannot change (all of it at the end of the document),
  // then drops those bytes.
  void EncodePending(bool document_end, std::vector<uint32_t>* tokens);
  // Encodes the pieces of pending_[begin, end) that end at or before `limit`; returns where the
  // last of them ends.
  size_t EncodeSegment(size_t begin, size_t end, size_t limit, std::vector<uint32_t>* tokens);

  std::shared_ptr<const BpeVocabulary> vocabulary_;
  int64_t eod_id_;
  int64_t end_of_text_id_;  // -1 when the vocabulary has no <|endoftext|>
  std::string pending_;
  std::vector<size_t> piece_ends_;
  std::unordered_map<std::string, std::vector<uint32_t>> cache_;  // piece -> its tokens
};

// The tokenizer `trainer pack --tokenizer gpt2` uses: the files in dir (`flag` names the option in
// messages), eod_id -1 meaning the vocabulary's <|endoftext|>.
StatusOr<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(const std::string& dir,
                                                      const std::string& flag, int64_t vocab_size,
                                                      int64_t eod_id);

}  // namespace trainer
