// TokenFileWriter: writes one packed-token HDF5 file (docs/data-format.md) as a stream: tokens
// are appended in chunk-sized writes to the extendible /tokens dataset, and document starts to
// the extendible /doc_offsets, so memory stays at one chunk of each whatever the corpus size;
// Finish() adds the total to /doc_offsets and the root attributes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/hdf5_util.h"

namespace trainer {

inline constexpr int kDataFormatVersion = 1;

struct TokenFileInfo {
  int64_t vocab_size = 0;  // /tokens is uint16 when vocab_size <= 65536, else uint32
  int64_t eod_id = 0;
  std::string tokenizer;
  bool loss_mask = false;  // also write /loss_mask (uint8, one per token; chat data)
};

// The `format` attribute of /loss_mask (docs/data-format.md).
inline constexpr const char* kLossMaskFormat = "uint8 per token: 1 = trained on as a target";

class TokenFileWriter {
 public:
  // Creates (truncates) `path`; /tokens is chunked by `chunk_tokens`.
  static StatusOr<std::unique_ptr<TokenFileWriter>> Create(const std::string& path,
                                                           const TokenFileInfo& info,
                                                           int64_t chunk_tokens);
  ~TokenFileWriter() = default;

  // Buffers tokens (each < vocab_size) and writes every full chunk. With info.loss_mask, `mask`
  // holds one byte per token (null: all 0); without, it is ignored.
  Status Append(const uint32_t* tokens, size_t count, const uint8_t* mask = nullptr);
  // Writes the buffered partial chunk.
  Status Flush();
  // Tokens appended so far (written and buffered).
  int64_t num_tokens() const { return written_ + buffered_; }
  // Records a document starting at token `start` of this file: the first at 0, each later one
  // at or past the one before.
  Status AddDocumentStart(uint64_t start);
  // Documents recorded so far.
  int64_t num_documents() const { return offsets_written_ + offsets_buffered_; }
  // Flushes, ends /doc_offsets with the total token count, writes the attributes, closes.
  Status Finish();

  const std::string& path() const { return path_; }
  int token_bytes() const { return token_bytes_; }

 private:
  TokenFileWriter() = default;
  Status WriteBuffer();
  // The buffered document starts; `last` from Finish.
  Status WriteOffsets(bool last);
  static constexpr int64_t kOffsetChunk = 8192;  // /doc_offsets entries a chunk (64 KiB)

  std::string path_;
  TokenFileInfo info_;
  int token_bytes_ = 2;
  hid_t mem_type_ = H5I_INVALID_HID;  // H5T_NATIVE_UINT16 or H5T_NATIVE_UINT32
  int64_t chunk_tokens_ = 0;
  Hdf5Handle file_;
  Hdf5Handle tokens_;
  Hdf5Handle mask_;                   // /loss_mask, with info.loss_mask
  std::vector<uint8_t> mask_buffer_;  // chunk_tokens bytes, with info.loss_mask
  std::vector<uint8_t> buffer_;       // (chunk_tokens * token_bytes) bytes
  int64_t buffered_ = 0;
  int64_t written_ = 0;
  Hdf5Handle offsets_;                    // /doc_offsets, made at the first write of starts
  std::vector<uint64_t> offsets_buffer_;  // kOffsetChunk entries
  int64_t offsets_buffered_ = 0;
  int64_t offsets_written_ = 0;
  uint64_t last_start_ = 0;
};

// One token stream written to two files: stream positions [0, cut) to `train` and [cut, ...)
// to `val` (trainer pack --val-fraction; without a split, cut past any position).
class SplitTokenWriter {
 public:
  SplitTokenWriter(TokenFileWriter* train, TokenFileWriter* val, int64_t cut)
      : train_(train), val_(val), cut_(cut) {}
  Status Append(const uint32_t* tokens, size_t count, const uint8_t* mask = nullptr);
  // A document starting at token `start` of the stream: the training file's where it starts
  // before the cut; the validation file's where it starts past it (its first document, from the
  // cut, was recorded when it was made: a document cut in two belongs to both).
  Status StartDocument(int64_t start);
  int64_t position() const { return position_; }
  // Tokens of mask 1 written to the training (0) or the validation (1) file.
  int64_t trained(int side) const { return trained_[side]; }

 private:
  TokenFileWriter* train_;
  TokenFileWriter* val_;
  int64_t cut_;
  int64_t position_ = 0;
  int64_t trained_[2] = {0, 0};
};

}  // namespace trainer
