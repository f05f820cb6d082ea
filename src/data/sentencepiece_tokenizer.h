// SentencePiece models (`trainer pack --tokenizer sentencepiece`, or --tokenizer hf on a folder
// with a tokenizer.model and no byte-level tokenizer.json): Llama-2, TinyLlama, Mistral's
// tokenizer.model through Debian's libsentencepiece. Each document starts with the model's BOS (as
// Hugging Face's LlamaTokenizer adds it); the end-of-document id is its EOS (</s>). SentencePiece
// normalizes and places its dummy prefix over the whole text, so a document is encoded whole when
// it ends: it is held in memory until then.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace trainer {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // `path` is the tokenizer.model; `flag` names the option in messages. eod_id -1: the EOS.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path,
                                                                const std::string& flag,
                                                                int64_t eod_id);
  ~SentencePieceTokenizer() override;

  std::string name() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod_id() const override { return eod_id_; }
  void BeginDocument(const std::string& source) override;
  Status Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) override;
  Status EndDocument(std::vector<uint32_t>* tokens) override;
  // The text of one id (`trainer sample`): its piece with the word marker U+2581 as a space, a
  // byte-fallback piece as its byte; "" for BOS and EOS, "[id]" past the model's ids.
  std::string Decode(uint32_t id) const;

 private:
  SentencePieceTokenizer() = default;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  int64_t vocab_size_ = 0, eod_id_ = -1, bos_id_ = -1;
  std::string source_, text_;
  std::vector<int> ids_;
};

// dir/tokenizer.model, for MakeTokenizer; vocab_size 0 or the model's.
StatusOr<std::unique_ptr<Tokenizer>> MakeSentencePieceTokenizer(const std::string& dir,
                                                                const std::string& flag,
                                                                int64_t vocab_size, int64_t eod_id);

}  // namespace trainer
