// Tokenizers for `trainer pack` (see tokenizer.h).
#include "data/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "data/bpe_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace trainer {

Status ByteTokenizer::Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) {
  tokens->insert(tokens->end(), bytes, bytes + size);
  return Status::Ok();
}

void PretokenizedReader::BeginDocument(const std::string& source) {
  source_ = source;
  bytes_done_ = 0;
  partial_size_ = 0;
}

Status PretokenizedReader::AppendToken(uint32_t token, std::vector<uint32_t>* tokens) {
  if (token >= static_cast<uint64_t>(vocab_size_)) {
    return DataError(
        StrFormat("token out of range (%s, byte %llu): token id %u >= --vocab-size %lld. Pass the "
                  "tokenizer's real --vocab-size or check that the file holds %s tokens",
                  source_.c_str(), static_cast<unsigned long long>(bytes_done_), token,
                  static_cast<long long>(vocab_size_), name().c_str()));
  }
  tokens->push_back(token);
  bytes_done_ += static_cast<uint64_t>(token_bytes_);
  return Status::Ok();
}

uint32_t PretokenizedReader::Decode(const uint8_t* bytes) const {
  uint32_t token = 0;
  for (int b = token_bytes_ - 1; b >= 0; --b) token = (token << 8) | bytes[b];
  return token;
}

Status PretokenizedReader::Encode(const uint8_t* bytes, size_t size,
                                  std::vector<uint32_t>* tokens) {
  const size_t width = static_cast<size_t>(token_bytes_);
  size_t i = 0;
  if (partial_size_ > 0) {  // complete the token cut by the previous chunk boundary
    size_t take = std::min(width - partial_size_, size);
    std::memcpy(partial_ + partial_size_, bytes, take);
    partial_size_ += take;
    i = take;
    if (partial_size_ < width) return Status::Ok();
    TRAINER_RETURN_IF_ERROR(AppendToken(Decode(partial_), tokens));
    partial_size_ = 0;
  }
  for (; i + width <= size; i += width)
    TRAINER_RETURN_IF_ERROR(AppendToken(Decode(bytes + i), tokens));
  partial_size_ = size - i;  // < width bytes held back
  std::memcpy(partial_, bytes + i, partial_size_);
  return Status::Ok();
}

Status PretokenizedReader::EndDocument(std::vector<uint32_t>*) {
  if (partial_size_ == 0) return Status::Ok();
  return DataError(StrFormat(
      "truncated token file (%s): its size is not a multiple of %d bytes (%d bytes left over). "
      "Check that it is a raw %s token file",
      source_.c_str(), token_bytes_, static_cast<int>(partial_size_), name().c_str()));
}

StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::string& name, int64_t vocab_size,
                                                   int64_t eod_id,
                                                   const std::string& tokenizer_dir) {
  if (name == "gpt2") return MakeBpeTokenizer(tokenizer_dir, "--tokenizer-dir", vocab_size, eod_id);
  if (name == "hf") return MakeHfTokenizer(tokenizer_dir, "--tokenizer-dir", vocab_size, eod_id);
  if (name == "sentencepiece")
    return MakeSentencePieceTokenizer(tokenizer_dir, "--tokenizer-dir", vocab_size, eod_id);
  if (!tokenizer_dir.empty())
    return UsageError(
        "--tokenizer-dir (pack) is for --tokenizer gpt2, hf or sentencepiece; leave "
        "it out for --tokenizer " +
        name);
  if (name == "bytes") {
    if (vocab_size != 0 && vocab_size != ByteTokenizer::kVocabSize)
      return UsageError(
          StrFormat("invalid --vocab-size (pack, --tokenizer bytes): %lld, but the "
                    "byte tokenizer's vocabulary is 257. Leave --vocab-size out",
                    static_cast<long long>(vocab_size)));
    if (eod_id != -1 && eod_id != ByteTokenizer::kEodId)
      return UsageError(
          StrFormat("invalid --eod-id (pack, --tokenizer bytes): %lld, but the byte "
                    "tokenizer's end-of-document id is 256. Leave --eod-id out",
                    static_cast<long long>(eod_id)));
    return std::unique_ptr<Tokenizer>(new ByteTokenizer());
  }
  if (name == "u16" || name == "u32") {
    int token_bytes = name == "u16" ? 2 : 4;
    int64_t max_vocab = int64_t{1} << (8 * token_bytes);
    if (vocab_size <= 0 || vocab_size > max_vocab)
      return UsageError(StrFormat(
          "missing or invalid --vocab-size (pack, --tokenizer %s): got %lld. Pass the vocabulary "
          "size of the tokenizer that wrote the files (1..%lld, e.g. 50257 for GPT-2)",
          name.c_str(), static_cast<long long>(vocab_size), static_cast<long long>(max_vocab)));
    if (eod_id == -1) eod_id = vocab_size - 1;
    if (eod_id < 0 || eod_id >= vocab_size)
      return UsageError(StrFormat(
          "invalid --eod-id (pack, --tokenizer %s): %lld is not below "
          "--vocab-size %lld. Pass an id inside the vocabulary",
          name.c_str(), static_cast<long long>(eod_id), static_cast<long long>(vocab_size)));
    return std::unique_ptr<Tokenizer>(new PretokenizedReader(token_bytes, vocab_size, eod_id));
  }
  return UsageError("unknown --tokenizer (pack): '" + name +
                    "'. Use bytes, gpt2 (GPT-2's BPE, with --tokenizer-dir), hf (a Hugging Face "
                    "tokenizer.json, with --tokenizer-dir), sentencepiece (a tokenizer.model, with "
                    "--tokenizer-dir), u16 (raw uint16 token "
                    "files) or u32 (raw uint32 token files)");
}

}  // namespace trainer
