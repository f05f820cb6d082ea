// SentencePiece models through libsentencepiece (see sentencepiece_tokenizer.h).
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstdlib>

#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path, const std::string& flag, int64_t eod_id) {
  if (!PathExists(path))
    return UsageError(
        StrFormat("no tokenizer.model at %s (%s, --tokenizer sentencepiece): point "
                  "%s at a folder with a SentencePiece model",
                  path.c_str(), flag.c_str(), flag.c_str()));
  std::unique_ptr<SentencePieceTokenizer> tokenizer(new SentencePieceTokenizer());
  tokenizer->processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto loaded = tokenizer->processor_->Load(path);
  if (!loaded.ok())
    return DataError(StrFormat("unreadable SentencePiece model (%s): %s", path.c_str(),
                               loaded.ToString().c_str()));
  tokenizer->vocab_size_ = tokenizer->processor_->GetPieceSize();
  tokenizer->bos_id_ = tokenizer->processor_->bos_id();
  if (eod_id == -1) {
    eod_id = tokenizer->processor_->eos_id();
    if (eod_id < 0)
      return UsageError(
          StrFormat("no EOS in the SentencePiece model %s (pack): give the "
                    "end-of-document id with --eod-id",
                    path.c_str()));
  }
  if (eod_id < 0 || eod_id >= tokenizer->vocab_size_)
    return UsageError(
        StrFormat("invalid --eod-id (pack, --tokenizer sentencepiece): %lld is not "
                  "below the vocabulary size %lld",
                  static_cast<long long>(eod_id), static_cast<long long>(tokenizer->vocab_size_)));
  tokenizer->eod_id_ = eod_id;
  return tokenizer;
}

void SentencePieceTokenizer::BeginDocument(const std::string& source) {
  source_ = source;
  text_.clear();
}

Status SentencePieceTokenizer::Encode(const uint8_t* bytes, size_t size,
                                      std::vector<uint32_t>* tokens) {
  text_.append(reinterpret_cast<const char*>(bytes), size);
  return Status::Ok();
}

Status SentencePieceTokenizer::EndDocument(std::vector<uint32_t>* tokens) {
  if (text_.empty()) return Status::Ok();
  ids_.clear();
  const auto encoded = processor_->Encode(text_, &ids_);
  if (!encoded.ok())
    return DataError(StrFormat("SentencePiece cannot encode %s: %s", source_.c_str(),
                               encoded.ToString().c_str()));
  if (bos_id_ >= 0 && document_markers_) tokens->push_back(static_cast<uint32_t>(bos_id_));
  tokens->insert(tokens->end(), ids_.begin(), ids_.end());
  text_.clear();
  text_.shrink_to_fit();
  return Status::Ok();
}

std::string SentencePieceTokenizer::Decode(uint32_t id) const {
  const int piece_id = static_cast<int>(id);
  if (id >= static_cast<uint64_t>(vocab_size_)) return StrFormat("[%u]", id);  // padding rows
  if (piece_id == bos_id_ || piece_id == processor_->eos_id()) return "";
  std::string piece = processor_->IdToPiece(piece_id);
  if (processor_->IsByte(piece_id))  // byte fallback: "<0x0A>"
    return std::string(1, static_cast<char>(std::strtol(piece.c_str() + 3, nullptr, 16)));
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word marker
  for (size_t at = piece.find(kSpace); at != std::string::npos; at = piece.find(kSpace, at + 1))
    piece.replace(at, kSpace.size(), " ");
  return piece;
}

StatusOr<std::unique_ptr<Tokenizer>> MakeSentencePieceTokenizer(const std::string& dir,
                                                                const std::string& flag,
                                                                int64_t vocab_size,
                                                                int64_t eod_id) {
  if (dir.empty())
    return UsageError(
        StrFormat("missing %s (pack, --tokenizer sentencepiece): give the folder "
                  "with tokenizer.model",
                  flag.c_str()));
  TRAINER_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> tokenizer,
                           SentencePieceTokenizer::Load(dir + "/tokenizer.model", flag, eod_id));
  if (vocab_size != 0 && vocab_size != tokenizer->vocab_size())
    return UsageError(
        StrFormat("invalid --vocab-size (pack, --tokenizer sentencepiece): %lld, but "
                  "%s/tokenizer.model has %lld pieces. Leave --vocab-size out",
                  static_cast<long long>(vocab_size), dir.c_str(),
                  static_cast<long long>(tokenizer->vocab_size())));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace trainer
