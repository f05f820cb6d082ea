// TokenDataset: a packed-token HDF5 file (docs/data-format.md) opened read-only and validated,
// read sample by sample through hyperslabs so that each rank touches only its own samples.
// Sample i of length T is tokens[i*T : i*T+T+1]: inputs are its first T tokens, targets the last T.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "io/hdf5_util.h"

namespace trainer {

// A contiguous range of a file's samples (the training or validation part of a file).
struct DataSplit {
  int64_t first_sample = 0;
  int64_t num_samples = 0;
};

struct DatasetOpenOptions {
  // false skips the token scan on open (e.g. on every rank but one, so that a large job does not
  // read the file once per rank); ReadSamples still checks every token it returns.
  bool scan_tokens = true;
  // Files up to this size have every token checked against vocab_size when opened; larger files
  // only their first and last scan chunk (ReadSamples still checks every token it returns).
  int64_t full_scan_max_bytes = int64_t{1} << 30;
  int64_t scan_chunk_tokens = int64_t{1} << 22;
  // Told of each chunk scanned (a watchdog's beat: a set of many files takes long); may be null.
  Progress* progress = nullptr;
};

class TokenDataset {
 public:
  // Opens and validates `path`. model_vocab_size > 0: the file's vocab_size must not exceed it
  // (<= 0 skips that check, e.g. for `trainer inspect`). Every error is kData naming the file.
  static StatusOr<std::unique_ptr<TokenDataset>> Open(const std::string& path,
                                                      int64_t model_vocab_size,
                                                      const DatasetOpenOptions& options = {});

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_documents() const { return num_documents_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t eod_id() const { return eod_id_; }
  int64_t format_version() const { return format_version_; }
  const std::string& tokenizer() const { return tokenizer_; }
  int token_bytes() const { return token_bytes_; }  // 2 (uint16) or 4 (uint32)
  // True when Open checked every token (the file was under full_scan_max_bytes).
  bool fully_scanned() const { return fully_scanned_; }

  // Samples of `seq_len` tokens (plus one target token): (num_tokens - 1) / seq_len.
  int64_t NumSamples(int seq_len) const;
  // kData error unless the file holds at least `min_samples` samples of `seq_len`; `key` names the
  // config key in the message (e.g. "Data.train_path").
  Status RequireSamples(int seq_len, int64_t min_samples, const std::string& key) const;

  // True when the file has a /loss_mask (chat data): ReadSamples then sets the targets whose token
  // has mask 0 to -1 (ignored by the loss).
  bool has_loss_mask() const { return has_loss_mask_; }

  // What tells this file apart from another of its kind, read cheaply (two small reads): the
  // CRC-32 of its attributes, its token and document counts, and its first and last 1024 tokens.
  // Ranks compare it to find node-local copies that differ.
  Status Fingerprint(uint32_t* crc);

  // Data.packing: documents. ReadSamples can then give each window's document starts, from the
  // entries of /doc_offsets around the window, read as it is (no table of every document: a
  // corpus of 2e9 documents would take 16 GB on every rank).
  void EnableDocumentStarts() { documents_ = true; }

  // Reads samples by file sample id into inputs (n, T) and targets (n, T), int32, n = ids.size().
  // One hyperslab read per run of consecutive ids; nothing outside the samples is read.
  Status ReadSamples(const std::vector<int64_t>& sample_ids, int seq_len, int32_t* inputs,
                     int32_t* targets);
  // The same with ids relative to `split` (0 is split.first_sample). With `shifts` (one per id,
  // in [0, seq_len)) sample id starts `shift` tokens later; the split's last sample, whose
  // shifted window could run past the split, is read unshifted.
  // With doc_starts (n, T) (after EnableDocumentStarts): doc_starts[i][t] is where the document of
  // window i's token t starts in the window (a window that starts mid-document starts with a
  // document of its own), and a target whose token starts a document is set to -1 (a document's
  // last token does not learn the next one's first). inputs and targets may be null (nothing
  // read from /tokens; a middle pipeline stage needs the document starts only).
  Status ReadSamples(const DataSplit& split, const std::vector<int64_t>& split_ids, int seq_len,
                     int32_t* inputs, int32_t* targets, const int64_t* shifts = nullptr,
                     int32_t* doc_starts = nullptr);

 private:
  TokenDataset() = default;
  Status Validate(int64_t model_vocab_size, const DatasetOpenOptions& options);
  Status ValidateTokens(const DatasetOpenOptions& options);
  Status ValidateDocOffsets();
  Status ValidateLossMask(hid_t access_props);
  // Opens /name into *out; a data error naming it unless it holds unsigned integers of `bytes`.
  Status OpenUnsignedDataset(const char* name, size_t bytes, hid_t access_props, Hdf5Handle* out);
  // A data error naming /name where it is a virtual dataset with a source missing, or a stored
  // one not written whole (chunks that would read as the fill value).
  Status CheckStoredWhole(hid_t dataset, const char* name);
  // Elements [start, start + count) of /name; a failed read names the file, the range and, where
  // one explains it, the filter this HDF5 lacks (a data error then).
  Status ReadRange(hid_t dataset, const char* name, int64_t start, int64_t count, hid_t mem_type,
                   void* buffer) const;
  // A data error unless mask[0, count), /loss_mask from `start`, holds 0s and 1s only.
  Status CheckMaskValues(const uint8_t* mask, int64_t start, int64_t count) const;
  // Reads tokens [start, start + count) into `buffer` (grown as needed) and checks each id.
  Status ReadTokens(int64_t start, int64_t count, std::vector<uint32_t>* buffer);
  Status ReadSampleRange(const DataSplit& split, const std::vector<int64_t>& ids, int seq_len,
                         int32_t* inputs, int32_t* targets, const int64_t* shifts,
                         int32_t* doc_starts);
  // A data error when the file opened was truncated since (fewer bytes than then): HDF5 reads
  // zeros past its end. A file replaced by another at its path (pack's rename) is not this one.
  Status CheckNotTruncated() const;
  // The document starts (T) of the window whose first token is `first`; targets (T) or null.
  Status WindowDocStarts(int64_t first, int seq_len, int32_t* starts, int32_t* targets);
  // doc_window_: the entries of /doc_offsets from the last at or before token `first` to the
  // first past token `end` (or the last entry); kept while the next window lies within them.
  // Found by single-entry reads narrowing the range, then read a block at a time.
  static constexpr int64_t kDocOffsetBlock = 4096;
  Status ReadWindowOffsets(int64_t first, int64_t end);
  Status DocOffsetsDoNotRise() const;

  std::string path_;
  int descriptor_ = -1;  // HDF5's descriptor of the file (-1: another driver; not checked)
  off_t opened_bytes_ = 0;
  Hdf5Handle file_;
  Hdf5Handle tokens_;
  Hdf5Handle doc_offsets_;
  Hdf5Handle loss_mask_;  // open when the file has one
  bool has_loss_mask_ = false;
  std::vector<uint8_t> mask_staging_;
  int token_bytes_ = 2;
  int64_t num_tokens_ = 0;
  int64_t num_documents_ = 0;
  int64_t vocab_size_ = 0;
  int64_t eod_id_ = 0;
  int64_t format_version_ = 0;
  std::string tokenizer_;
  bool fully_scanned_ = false;
  std::vector<uint32_t> staging_;  // grows to the largest read once, then is reused
  bool documents_ = false;         // EnableDocumentStarts
  std::vector<uint64_t> doc_window_;  // ReadWindowOffsets: entries [base, base + size)
  int64_t doc_window_base_ = 0;
};

}  // namespace trainer
