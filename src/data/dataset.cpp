// TokenDataset (see dataset.h).
#include "data/dataset.h"

#include <sys/stat.h>

#include <algorithm>

#include "common/filesystem.h"
#include "common/log.h"
#include "io/checksum.h"

namespace trainer {
namespace {

const char* kRepack = "Re-create it with `trainer pack`";
const char* kMaskFix =
    "Write it as 1 per trained token and 0 elsewhere, as long as /tokens (h5py: "
    "data=mask.astype('uint8'))";

std::string DescribeType(hid_t type) {
  H5T_class_t type_class = H5Tget_class(type);
  size_t bits = 8 * H5Tget_size(type);
  switch (type_class) {
    case H5T_INTEGER:
      return StrFormat("%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_FLOAT:
      return StrFormat("float%zu", bits);
    case H5T_STRING:
      return "string";
    case H5T_ENUM:
      return "an enum (h5py's bool)";
    default:
      return StrFormat("a non-numeric type (class %d)", static_cast<int>(type_class));
  }
}

}  // namespace

StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const std::string& path,
                                                           int64_t model_vocab_size,
                                                           const DatasetOpenOptions& options) {
  SilenceHdf5Errors();
  struct stat info;
  if (stat(path.c_str(), &info) != 0)
    return DataError("dataset file not found (" + path +
                     "): no such file. Check the path or create it with `trainer pack`");
  if (!S_ISREG(info.st_mode))  // a FIFO would block the reader
    return DataError("dataset is not a file (" + path +
                     "): a folder, FIFO or device. Pass a file written by `trainer pack`");
  if (H5Fis_hdf5(path.c_str()) <= 0)
    return DataError("not an HDF5 file (" + path +
                     "): no HDF5 signature found. Pass a file written by `trainer pack`");
  std::unique_ptr<TokenDataset> dataset(new TokenDataset());
  dataset->path_ = path;
  dataset->opened_bytes_ = info.st_size;
  std::string why;
  if (!Hdf5OpenReadOnly(path, &dataset->file_, &why))
    return DataError("cannot open dataset (" + path + "): " + why +
                     ". Check the file's permissions and that it is complete");
  // The descriptor HDF5 reads through (its default sec2 driver), for CheckNotTruncated.
  Hdf5Handle access;
  void* handle = nullptr;
  if (access.Reset(H5Fget_access_plist(dataset->file_.get()), H5Pclose) >= 0 &&
      H5Pget_driver(access.get()) == H5FD_SEC2 &&
      H5Fget_vfd_handle(dataset->file_.get(), access.get(), &handle) >= 0 && handle != nullptr)
    dataset->descriptor_ = *static_cast<int*>(handle);
  TRAINER_RETURN_IF_ERROR(dataset->Validate(model_vocab_size, options));
  return dataset;
}

Status TokenDataset::Validate(int64_t model_vocab_size, const DatasetOpenOptions& options) {
  const char* path = path_.c_str();
  // /tokens: 1-D uint16 or uint32, not empty.
  if (H5Lexists(file_.get(), "tokens", H5P_DEFAULT) <= 0)
    return DataError(
        StrFormat("dataset has no /tokens (%s): not a packed-token file. %s", path, kRepack));
  Hdf5Handle access_props;  // no chunk cache: reads go straight to the samples' bytes
  HDF5_CHECK(access_props.Reset(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose));
  HDF5_CHECK(H5Pset_chunk_cache(access_props.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT));
  if (tokens_.Reset(H5Dopen2(file_.get(), "tokens", access_props.get()), H5Dclose) < 0)
    return DataError(
        StrFormat("cannot open /tokens (%s): %s. %s", path, Hdf5ErrorText().c_str(), kRepack));
  TRAINER_RETURN_IF_ERROR(CheckStoredWhole(tokens_.get(), "tokens"));
  Hdf5Handle type;
  HDF5_CHECK(type.Reset(H5Dget_type(tokens_.get()), H5Tclose));
  size_t type_size = H5Tget_size(type.get());
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_sign(type.get()) != H5T_SGN_NONE ||
      (type_size != 2 && type_size != 4))
    return DataError(
        StrFormat("wrong token type (%s, /tokens): %s, expected uint16 or uint32. %s (h5py: "
                  "data=tokens.astype('uint32'))",
                  path, DescribeType(type.get()).c_str(), kRepack));
  token_bytes_ = static_cast<int>(type_size);
  num_tokens_ = Hdf5Length1D(tokens_.get());
  if (num_tokens_ < 0)
    return DataError(StrFormat("wrong /tokens shape (%s): not 1-D. %s", path, kRepack));
  if (num_tokens_ == 0)
    return DataError(
        StrFormat("empty dataset (%s, /tokens): it holds no tokens. Pack some text "
                  "into it",
                  path));

  // Root attributes.
  for (const char* name : {"format_version", "vocab_size", "eod_id", "tokenizer"}) {
    if (H5Aexists(file_.get(), name) <= 0)
      return DataError(StrFormat("dataset has no '%s' attribute (%s): not a packed-token file. %s",
                                 name, path, kRepack));
    Hdf5Handle attribute, attribute_type;
    HDF5_CHECK(attribute.Reset(H5Aopen(file_.get(), name, H5P_DEFAULT), H5Aclose));
    HDF5_CHECK(attribute_type.Reset(H5Aget_type(attribute.get()), H5Tclose));
    H5T_class_t want = std::string(name) == "tokenizer" ? H5T_STRING : H5T_INTEGER;
    if (H5Tget_class(attribute_type.get()) != want)
      return DataError(StrFormat("wrong type of attribute '%s' (%s): %s, expected %s. %s", name,
                                 path, DescribeType(attribute_type.get()).c_str(),
                                 want == H5T_STRING ? "a string" : "an integer", kRepack));
    const int64_t values = Hdf5AttributeValueCount(attribute.get());
    if (values != 1)
      return DataError(StrFormat(
          "wrong shape of attribute '%s' (%s): %lld values, expected one. Write it as a single "
          "value (h5py: f.attrs['%s'] = %s)",
          name, path, static_cast<long long>(values), name, want == H5T_STRING ? "'bytes'" : "1"));
  }
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(file_.get(), "format_version", &format_version_));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(file_.get(), "vocab_size", &vocab_size_));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadIntAttribute(file_.get(), "eod_id", &eod_id_));
  TRAINER_RETURN_IF_ERROR(Hdf5ReadStringAttribute(file_.get(), "tokenizer", &tokenizer_));
  if (format_version_ != 1)
    return DataError(
        StrFormat("unsupported dataset format_version (%s): %lld, this trainer reads "
                  "1. Re-pack it with this trainer",
                  path, static_cast<long long>(format_version_)));
  if (vocab_size_ <= 0 || vocab_size_ > (int64_t{1} << 32))
    return DataError(StrFormat("invalid vocab_size attribute (%s): %lld. %s", path,
                               static_cast<long long>(vocab_size_), kRepack));
  if (model_vocab_size > 0 && vocab_size_ > model_vocab_size)
    return DataError(StrFormat(
        "dataset vocabulary larger than the model's (%s, Model.vocab_size): vocab_size %lld > "
        "Model.vocab_size %lld. Use data packed with the model's tokenizer, or, for a new model "
        "(not a checkpoint's), set Model.vocab_size to at least %lld",
        path, static_cast<long long>(vocab_size_), static_cast<long long>(model_vocab_size),
        static_cast<long long>(vocab_size_)));
  if (eod_id_ < 0 || eod_id_ >= vocab_size_)
    return DataError(StrFormat(
        "invalid eod_id attribute (%s): %lld is outside [0, vocab_size "
        "%lld). %s",
        path, static_cast<long long>(eod_id_), static_cast<long long>(vocab_size_), kRepack));
  TRAINER_RETURN_IF_ERROR(ValidateLossMask(access_props.get()));
  TRAINER_RETURN_IF_ERROR(ValidateTokens(options));
  return ValidateDocOffsets();
}

Status TokenDataset::OpenUnsignedDataset(const char* name, size_t bytes, hid_t access_props,
                                         Hdf5Handle* out) {
  const char* path = path_.c_str();
  if (out->Reset(H5Dopen2(file_.get(), name, access_props), H5Dclose) < 0)
    return DataError(StrFormat("cannot open /%s (%s): %s. %s", name, path,
                               Hdf5ErrorText().c_str(), kRepack));
  TRAINER_RETURN_IF_ERROR(CheckStoredWhole(out->get(), name));
  Hdf5Handle type;
  HDF5_CHECK(type.Reset(H5Dget_type(out->get()), H5Tclose));
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != bytes)
    return DataError(StrFormat("wrong /%s type (%s): %s, expected uint%zu. %s", name, path,
                               DescribeType(type.get()).c_str(), 8 * bytes,
                               std::string(name) == "loss_mask" ? kMaskFix : kRepack));
  return Status::Ok();
}

Status TokenDataset::CheckStoredWhole(hid_t dataset, const char* name) {
  const std::string missing = Hdf5MissingVirtualSource(dataset, ParentDirectory(path_));
  if (!missing.empty())
    return DataError(StrFormat("cannot read /%s (%s): %s", name, path_.c_str(), missing.c_str()));
  // Chunks never written read as the fill value (zeros): a file whose writer stopped early.
  uint64_t stored = 0, needed = 0;
  if (Hdf5StoredWhole(dataset, &stored, &needed)) return Status::Ok();
  return DataError(StrFormat(
      "/%s of %s was not written whole (%llu of the %llu chunks or bytes its shape takes are "
      "stored): the rest would read as zeros. Its writer stopped early: pack the file again",
      name, path_.c_str(), static_cast<unsigned long long>(stored),
      static_cast<unsigned long long>(needed)));
}

Status TokenDataset::ReadRange(hid_t dataset, const char* name, int64_t start, int64_t count,
                               hid_t mem_type, void* buffer) const {
  Status read = Hdf5ReadRange1D(dataset, start, count, mem_type, buffer);
  if (read.ok()) return read;
  const std::string filter = Hdf5MissingFilter(dataset);
  const std::string where =
      StrFormat("%s, /%s[%lld:%lld]", path_.c_str(), name, static_cast<long long>(start),
                static_cast<long long>(start + count));
  if (!filter.empty())
    return DataError(StrFormat("cannot read /%s (%s): %s", name, where.c_str(), filter.c_str()));
  return Status(read.code(),
                StrFormat("cannot read /%s (%s): %s", name, where.c_str(), read.message().c_str()));
}

Status TokenDataset::ValidateLossMask(hid_t access_props) {
  if (H5Lexists(file_.get(), "loss_mask", H5P_DEFAULT) <= 0) return Status::Ok();
  const char* path = path_.c_str();
  TRAINER_RETURN_IF_ERROR(OpenUnsignedDataset("loss_mask", 1, access_props, &loss_mask_));
  Hdf5Handle type;
  HDF5_CHECK(type.Reset(H5Dget_type(loss_mask_.get()), H5Tclose));
  if (H5Tget_sign(type.get()) != H5T_SGN_NONE)  // HDF5 would read -1 as 0
    return DataError(
        StrFormat("wrong /loss_mask type (%s): int8, expected uint8 (0 or 1). %s", path, kMaskFix));
  if (Hdf5Length1D(loss_mask_.get()) < 0)
    return DataError(StrFormat("wrong /loss_mask shape (%s): not 1-D. %s", path, kMaskFix));
  if (Hdf5Length1D(loss_mask_.get()) != num_tokens_)
    return DataError(StrFormat("wrong /loss_mask length (%s): %lld, /tokens has %lld. %s", path,
                               static_cast<long long>(Hdf5Length1D(loss_mask_.get())),
                               static_cast<long long>(num_tokens_), kRepack));
  has_loss_mask_ = true;
  return Status::Ok();
}

Status TokenDataset::ValidateTokens(const DatasetOpenOptions& options) {
  const int64_t chunk = std::max<int64_t>(1, options.scan_chunk_tokens);
  std::vector<uint32_t> buffer;
  fully_scanned_ = false;
  if (!options.scan_tokens) return Status::Ok();
  fully_scanned_ = num_tokens_ * token_bytes_ <= options.full_scan_max_bytes;
  constexpr const char* kScan = "rank 0's check of every data token (Data.train_path's files)";
  if (fully_scanned_) {
    for (int64_t start = 0; start < num_tokens_; start += chunk) {
      ReportProgress(options.progress, kScan);
      TRAINER_RETURN_IF_ERROR(ReadTokens(start, std::min(chunk, num_tokens_ - start), &buffer));
    }
  } else {  // large file: its ends only (docs/data-format.md)
    TRAINER_RETURN_IF_ERROR(ReadTokens(0, std::min(chunk, num_tokens_), &buffer));
    int64_t last = std::max<int64_t>(0, num_tokens_ - chunk);
    TRAINER_RETURN_IF_ERROR(ReadTokens(last, num_tokens_ - last, &buffer));
  }
  if (!has_loss_mask_ || !fully_scanned_) return Status::Ok();
  // Values other than 0 and 1, and a mask of zeros only: every target ignored, a loss of 0/0
  // that trains and measures nothing.
  std::vector<uint8_t> mask;
  bool trained = false;
  for (int64_t start = 0; start < num_tokens_; start += chunk) {
    ReportProgress(options.progress, kScan);
    const int64_t count = std::min(chunk, num_tokens_ - start);
    mask.resize(static_cast<size_t>(count));
    TRAINER_RETURN_IF_ERROR(
        ReadRange(loss_mask_.get(), "loss_mask", start, count, H5T_NATIVE_UINT8, mask.data()));
    TRAINER_RETURN_IF_ERROR(CheckMaskValues(mask.data(), start, count));
    trained = trained || std::any_of(mask.begin(), mask.end(), [](uint8_t m) { return m != 0; });
  }
  if (trained) return Status::Ok();
  return DataError(StrFormat(
      "no trained tokens (%s, /loss_mask): its mask is 0 at every token, so no target counts and "
      "the file trains (or measures) nothing. Re-pack it with assistant replies, or leave it out",
      path_.c_str()));
}

Status TokenDataset::CheckMaskValues(const uint8_t* mask, int64_t start, int64_t count) const {
  for (int64_t i = 0; i < count; ++i)
    if (mask[i] > 1)
      return DataError(
          StrFormat("loss mask value out of range (%s, /loss_mask[%lld]): %u, "
                    "expected 0 or 1. %s",
                    path_.c_str(), static_cast<long long>(start + i), mask[i], kMaskFix));
  return Status::Ok();
}

Status TokenDataset::ValidateDocOffsets() {
  const char* path = path_.c_str();
  if (H5Lexists(file_.get(), "doc_offsets", H5P_DEFAULT) <= 0)
    return DataError(
        StrFormat("dataset has no /doc_offsets (%s): not a packed-token file. %s", path, kRepack));
  TRAINER_RETURN_IF_ERROR(OpenUnsignedDataset("doc_offsets", 8, H5P_DEFAULT, &doc_offsets_));
  int64_t length = Hdf5Length1D(doc_offsets_.get());
  if (length < 2)
    return DataError(
        StrFormat("wrong /doc_offsets shape (%s): expected 1-D with at least 2 "
                  "entries (document starts and the total). %s",
                  path, kRepack));
  num_documents_ = length - 1;
  if (num_documents_ > std::max<int64_t>(num_tokens_, 1))  // before any buffer of that length
    return DataError(StrFormat(
        "wrong /doc_offsets length (%s): %lld documents for %lld tokens, where each document "
        "holds at least one (its end of document). %s",
        path, static_cast<long long>(num_documents_), static_cast<long long>(num_tokens_),
        kRepack));
  // The ends always; every entry (non-decreasing) when the tokens were fully scanned too.
  std::vector<uint64_t> offsets(fully_scanned_ ? length : 1);
  uint64_t last = 0;
  TRAINER_RETURN_IF_ERROR(
      ReadRange(doc_offsets_.get(), "doc_offsets", length - 1, 1, H5T_NATIVE_UINT64, &last));
  TRAINER_RETURN_IF_ERROR(ReadRange(doc_offsets_.get(), "doc_offsets", 0,
                                    static_cast<int64_t>(offsets.size()), H5T_NATIVE_UINT64,
                                    offsets.data()));
  bool sorted = std::is_sorted(offsets.begin(), offsets.end());
  if (offsets.front() != 0 || last != static_cast<uint64_t>(num_tokens_) || !sorted)
    return DataError(StrFormat(
        "inconsistent /doc_offsets (%s): they must rise from 0 to the "
        "token count %lld (first %llu, last %llu). %s",
        path, static_cast<long long>(num_tokens_), static_cast<unsigned long long>(offsets.front()),
        static_cast<unsigned long long>(last), kRepack));
  return Status::Ok();
}

Status TokenDataset::Fingerprint(uint32_t* crc) {
  const int64_t facts[] = {num_tokens_, num_documents_, vocab_size_, eod_id_, format_version_};
  uint32_t sum = Crc32(facts, sizeof(facts));
  sum = Crc32(tokenizer_.data(), tokenizer_.size(), sum);
  const int64_t n = std::min<int64_t>(1024, num_tokens_);
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (const int64_t start : {int64_t{0}, num_tokens_ - n}) {
    TRAINER_RETURN_IF_ERROR(
        ReadRange(tokens_.get(), "tokens", start, n, H5T_NATIVE_UINT32, tokens.data()));
    sum = Crc32(tokens.data(), tokens.size() * sizeof(uint32_t), sum);
  }
  *crc = sum;
  return Status::Ok();
}

Status TokenDataset::ReadTokens(int64_t start, int64_t count, std::vector<uint32_t>* buffer) {
  if (buffer->size() < static_cast<size_t>(count)) buffer->resize(static_cast<size_t>(count));
  TRAINER_RETURN_IF_ERROR(
      ReadRange(tokens_.get(), "tokens", start, count, H5T_NATIVE_UINT32, buffer->data()));
  const uint32_t* tokens = buffer->data();
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] >= static_cast<uint64_t>(vocab_size_))
      return DataError(
          StrFormat("token out of range (%s, /tokens[%lld]): token id %u >= "
                    "vocab_size %lld. Re-pack the data with the right tokenizer or "
                    "--vocab-size",
                    path_.c_str(), static_cast<long long>(start + i), tokens[i],
                    static_cast<long long>(vocab_size_)));
  }
  return Status::Ok();
}

int64_t TokenDataset::NumSamples(int seq_len) const {
  if (seq_len <= 0 || num_tokens_ < 1) return 0;
  return (num_tokens_ - 1) / seq_len;
}

Status TokenDataset::RequireSamples(int seq_len, int64_t min_samples,
                                    const std::string& key) const {
  int64_t have = NumSamples(seq_len);
  if (have >= min_samples) return Status::Ok();
  return DataError(
      StrFormat("dataset too short (%s, %s): %lld tokens hold %lld samples of %d+1 "
                "tokens, need at least %lld. Pack more text or lower Model.seq_len",
                path_.c_str(), key.c_str(), static_cast<long long>(num_tokens_),
                static_cast<long long>(have), seq_len, static_cast<long long>(min_samples)));
}

Status TokenDataset::ReadSamples(const std::vector<int64_t>& sample_ids, int seq_len,
                                 int32_t* inputs, int32_t* targets) {
  return ReadSampleRange(DataSplit{0, NumSamples(seq_len)}, sample_ids, seq_len, inputs, targets,
                         nullptr, nullptr);
}

Status TokenDataset::ReadSamples(const DataSplit& split, const std::vector<int64_t>& split_ids,
                                 int seq_len, int32_t* inputs, int32_t* targets,
                                 const int64_t* shifts, int32_t* doc_starts) {
  return ReadSampleRange(split, split_ids, seq_len, inputs, targets, shifts, doc_starts);
}

Status TokenDataset::DocOffsetsDoNotRise() const {
  return DataError(
      StrFormat("inconsistent /doc_offsets (%s): they do not rise. %s", path_.c_str(), kRepack));
}

Status TokenDataset::ReadWindowOffsets(int64_t first, int64_t end) {
  std::vector<uint64_t>& w = doc_window_;
  const int64_t last_entry = num_documents_;  // /doc_offsets[last_entry] is the token count
  if (!w.empty() && w.front() <= static_cast<uint64_t>(first) &&
      (w.back() > static_cast<uint64_t>(end) ||
       doc_window_base_ + static_cast<int64_t>(w.size()) - 1 == last_entry))
    return Status::Ok();  // the previous window's entries cover this one
  // off[a] <= first < off[b] (the ends were checked at open), narrowed by reads of one entry at
  // the place interpolated between them (every other one halving instead, for lopsided files)
  // until at most a block lies between.
  int64_t a = 0, b = last_entry;
  uint64_t va = 0, vb = static_cast<uint64_t>(num_tokens_);
  for (int probe = 0; b - a > kDocOffsetBlock; ++probe) {
    int64_t mid = a + (b - a) / 2;
    if (probe % 2 == 0 && vb > va)
      mid = a + static_cast<int64_t>(static_cast<__int128>(static_cast<uint64_t>(first) - va) *
                                     (b - a) / (vb - va));
    mid = std::clamp(mid, a + 1, b - 1);
    uint64_t v = 0;
    TRAINER_RETURN_IF_ERROR(
        ReadRange(doc_offsets_.get(), "doc_offsets", mid, 1, H5T_NATIVE_UINT64, &v));
    if (v < va || v > vb) return DocOffsetsDoNotRise();
    if (v <= static_cast<uint64_t>(first)) {
      a = mid, va = v;
    } else {
      b = mid, vb = v;
    }
  }
  // Entries from a on, a block at a time, up to the first one past `end` (or the last).
  w.clear();
  for (int64_t at = a; at <= last_entry && (w.empty() || w.back() <= static_cast<uint64_t>(end));) {
    const int64_t count = std::min(kDocOffsetBlock, last_entry + 1 - at);
    w.resize(w.size() + static_cast<size_t>(count));
    TRAINER_RETURN_IF_ERROR(ReadRange(doc_offsets_.get(), "doc_offsets", at, count,
                                      H5T_NATIVE_UINT64, w.data() + w.size() - count));
    at += count;
  }
  if (!std::is_sorted(w.begin(), w.end()) || w.front() > static_cast<uint64_t>(first))
    return DocOffsetsDoNotRise();
  // From the last entry at or before `first`: the document holding it.
  const size_t holding =
      std::upper_bound(w.begin(), w.end(), static_cast<uint64_t>(first)) - w.begin() - 1;
  w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(holding));
  doc_window_base_ = a + static_cast<int64_t>(holding);
  return Status::Ok();
}

Status TokenDataset::WindowDocStarts(int64_t first, int seq_len, int32_t* starts,
                                     int32_t* targets) {
  TRAINER_RETURN_IF_ERROR(ReadWindowOffsets(first, first + seq_len));
  const std::vector<uint64_t>& off = doc_window_;
  // k: the document holding token `pos` (off[k] <= pos < off[k + 1]; empty documents skipped).
  size_t k = std::upper_bound(off.begin(), off.end(), static_cast<uint64_t>(first)) - off.begin();
  k = k == 0 ? 0 : k - 1;
  auto start_of = [&](int64_t pos) {  // where pos's document starts, in window positions
    while (k + 1 < off.size() && off[k + 1] <= static_cast<uint64_t>(pos)) ++k;
    return static_cast<int32_t>(std::max<int64_t>(static_cast<int64_t>(off[k]) - first, 0));
  };
  for (int t = 0; t < seq_len; ++t) starts[t] = start_of(first + t);
  if (targets == nullptr) return Status::Ok();
  // Target t is token t + 1: ignored where that token starts a document (starts[t+1] == t+1).
  for (int t = 0; t + 1 < seq_len; ++t)
    if (starts[t + 1] == t + 1) targets[t] = -1;
  if (start_of(first + seq_len) == seq_len) targets[seq_len - 1] = -1;
  return Status::Ok();
}

Status TokenDataset::CheckNotTruncated() const {
  struct stat now;
  if (descriptor_ < 0 || fstat(descriptor_, &now) != 0 || now.st_size >= opened_bytes_)
    return Status::Ok();
  return DataError(StrFormat(
      "dataset file truncated during the run (%s: %lld bytes when opened, %lld now): the samples "
      "past its new end would read as zeros. Restore the file (trainer pack writes a new one and "
      "renames it over the old), then resume with --resume auto",
      path_.c_str(), static_cast<long long>(opened_bytes_), static_cast<long long>(now.st_size)));
}

Status TokenDataset::ReadSampleRange(const DataSplit& split, const std::vector<int64_t>& ids,
                                     int seq_len, int32_t* inputs, int32_t* targets,
                                     const int64_t* shifts, int32_t* doc_starts) {
  TRAINER_RETURN_IF_ERROR(CheckNotTruncated());
  const int64_t T = seq_len;
  if (doc_starts != nullptr && !documents_)
    return RuntimeError(StrFormat("document starts asked of %s before EnableDocumentStarts (a bug)",
                                  path_.c_str()));
  const int64_t file_samples = NumSamples(seq_len);
  const size_t n = ids.size();
  for (int64_t id : ids) {
    if (seq_len <= 0 || id < 0 || id >= split.num_samples ||
        split.first_sample + id >= file_samples)
      return RuntimeError(StrFormat(
          "sample id out of range (%s): id %lld of a split of %lld "
          "samples from %lld (file: %lld samples of %d tokens). The "
          "caller's sample order is wrong (a bug)",
          path_.c_str(), static_cast<long long>(id), static_cast<long long>(split.num_samples),
          static_cast<long long>(split.first_sample), static_cast<long long>(file_samples),
          seq_len));
  }
  // The token offset of sample i's window past its fixed start.
  auto shift = [&](size_t i) -> int64_t {
    if (shifts == nullptr || ids[i] == split.num_samples - 1) return 0;
    return shifts[i];
  };
  size_t i = 0;
  while (i < n) {
    size_t j = i;  // [i, j] is a run of consecutive ids: one read of k*T+1 tokens
    while (j + 1 < n && ids[j + 1] == ids[j] + 1 && shift(j + 1) == shift(i)) ++j;
    const int64_t k = static_cast<int64_t>(j - i + 1);
    const int64_t first = (split.first_sample + ids[i]) * T + shift(i);  // the run's first token
    if (inputs != nullptr) TRAINER_RETURN_IF_ERROR(ReadTokens(first, k * T + 1, &staging_));
    if (has_loss_mask_ && inputs != nullptr) {
      mask_staging_.resize(static_cast<size_t>(k * T + 1));
      TRAINER_RETURN_IF_ERROR(ReadRange(loss_mask_.get(), "loss_mask", first, k * T + 1,
                                        H5T_NATIVE_UINT8, mask_staging_.data()));
      TRAINER_RETURN_IF_ERROR(CheckMaskValues(mask_staging_.data(), first, k * T + 1));
    }
    for (int64_t r = 0; r < k; ++r) {
      const int64_t row = (static_cast<int64_t>(i) + r) * T;
      if (inputs != nullptr) {
        const uint32_t* sample = staging_.data() + r * T;  // (T+1) tokens
        int32_t* in = inputs + row;
        int32_t* out = targets + row;
        for (int64_t t = 0; t < T; ++t) {
          in[t] = static_cast<int32_t>(sample[t]);
          out[t] = static_cast<int32_t>(sample[t + 1]);
        }
        if (has_loss_mask_) {  // a target of mask 0 is ignored: -1
          const uint8_t* mask = mask_staging_.data() + r * T;
          for (int64_t t = 0; t < T; ++t)
            if (mask[t + 1] == 0) out[t] = -1;
        }
      }
      if (doc_starts != nullptr)
        TRAINER_RETURN_IF_ERROR(WindowDocStarts(first + r * T, seq_len, doc_starts + row,
                                                inputs != nullptr ? targets + row : nullptr));
    }
    i = j + 1;
  }
  return Status::Ok();
}

}  // namespace trainer
