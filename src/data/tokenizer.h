// Tokenizers for `trainer pack`: the streaming Tokenizer interface, ByteTokenizer (vocab 257:
// bytes 0..255 and end-of-document 256) and PretokenizedReader (raw little-endian uint16 or uint32
// token files, like nanoGPT's .bin), plus MakeTokenizer to pick one by name (GPT-2's byte-level
// BPE is in bpe_tokenizer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  // The token appended after every document.
  virtual int64_t eod_id() const = 0;

  // Starts a document; `source` (a file name) names it in error messages.
  virtual void BeginDocument(const std::string& source) = 0;
  // Appends the tokens of the document's next `size` bytes to `tokens`. A token cut by the chunk
  // boundary is held back until the next call, so any chunking gives the same tokens.
  virtual Status Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) = 0;
  // Ends the document (the caller appends eod_id()); fails when a partial token is left over.
  virtual Status EndDocument(std::vector<uint32_t>* tokens) = 0;
  // The exact token count of a document of `document_bytes` bytes when the size alone tells it,
  // else -1 (then `trainer pack --val-fraction` tokenizes once more just to count).
  virtual int64_t TokenCount(int64_t document_bytes) const { return -1; }

  // false: documents get none of the tokenizer's own markers (the tokens a Hugging Face
  // post-processor adds around each, SentencePiece's BOS), as for the pieces of a chat template,
  // which writes its own. Default true.
  void set_document_markers(bool on) { document_markers_ = on; }

 protected:
  bool document_markers_ = true;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 257;
  static constexpr int64_t kEodId = 256;

  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return kVocabSize; }
  int64_t eod_id() const override { return kEodId; }
  void BeginDocument(const std::string&) override {}
  Status Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) override;
  Status EndDocument(std::vector<uint32_t>*) override { return Status::Ok(); }
  int64_t TokenCount(int64_t document_bytes) const override { return document_bytes; }
};

// Files that already hold token ids, `token_bytes` (2 or 4) little-endian bytes each. Every id
// must be < vocab_size.
class PretokenizedReader final : public Tokenizer {
 public:
  PretokenizedReader(int token_bytes, int64_t vocab_size, int64_t eod_id)
      : token_bytes_(token_bytes), vocab_size_(vocab_size), eod_id_(eod_id) {}

  std::string name() const override { return token_bytes_ == 2 ? "u16" : "u32"; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod_id() const override { return eod_id_; }
  void BeginDocument(const std::string& source) override;
  Status Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) override;
  Status EndDocument(std::vector<uint32_t>* tokens) override;
  // -1 for a size that is not whole tokens (tokenizing reports that error).
  int64_t TokenCount(int64_t document_bytes) const override {
    return document_bytes % token_bytes_ == 0 ? document_bytes / token_bytes_ : -1;
  }

 private:
  Status AppendToken(uint32_t token, std::vector<uint32_t>* tokens);
  uint32_t Decode(const uint8_t* bytes) const;  // token_bytes_ little-endian bytes

  int token_bytes_;
  int64_t vocab_size_;
  int64_t eod_id_;
  std::string source_;
  uint64_t bytes_done_ = 0;  // offset in the document, for error messages
  uint8_t partial_[4] = {0, 0, 0, 0};
  size_t partial_size_ = 0;
};

// "bytes" (vocab_size 0 or 257, eod_id -1 or 256), "u16" (vocab_size 1..65536 required), "u32"
// (vocab_size 1..2^32 required), "gpt2" (the files in tokenizer_dir; vocab_size 0 or theirs) or
// "hf" (tokenizer_dir/tokenizer.json, hf_tokenizer.h; vocab_size 0 or its own).
// eod_id -1 means vocab_size - 1 for the pretokenized kinds (GPT-2's <|endoftext|> is 50256 with
// vocab 50257) <|endoftext|> for gpt2 and
// the tokenizer's end-of-document token for hf. Usage errors name the offending flag.
StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& name, int64_t vocab_size,
                                                   int64_t eod_id,
                                                   const std::string& tokenizer_dir = "");

}  // namespace trainer
