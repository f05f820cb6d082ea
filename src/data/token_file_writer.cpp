// TokenFileWriter (see token_file_writer.h).
#include "data/token_file_writer.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"

namespace trainer {

StatusOr<std::unique_ptr<TokenFileWriter>> TokenFileWriter::Create(const std::string& path,
                                                                   const TokenFileInfo& info,
                                                                   int64_t chunk_tokens) {
  SilenceHdf5Errors();
  std::unique_ptr<TokenFileWriter> writer(new TokenFileWriter());
  writer->path_ = path;
  writer->info_ = info;
  writer->token_bytes_ = info.vocab_size <= 65536 ? 2 : 4;
  writer->mem_type_ = writer->token_bytes_ == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
  writer->chunk_tokens_ = std::max<int64_t>(1, chunk_tokens);
  writer->buffer_.resize(static_cast<size_t>(writer->chunk_tokens_ * writer->token_bytes_));

  if (writer->file_.Reset(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                          H5Fclose) < 0) {
    return DataError("cannot create output file (" + path + "): " + Hdf5ErrorText() +
                     ". Choose a writable --output folder with free space");
  }
  hsize_t initial[1] = {0};
  hsize_t max_dims[1] = {H5S_UNLIMITED};
  hsize_t chunk[1] = {static_cast<hsize_t>(writer->chunk_tokens_)};
  Hdf5Handle space, create_props, access_props;
  HDF5_CHECK(space.Reset(H5Screate_simple(1, initial, max_dims), H5Sclose));
  HDF5_CHECK(create_props.Reset(H5Pcreate(H5P_DATASET_CREATE), H5Pclose));
  HDF5_CHECK(H5Pset_chunk(create_props.get(), 1, chunk));
  HDF5_CHECK(H5Pset_fill_time(create_props.get(), H5D_FILL_TIME_NEVER));
  // No chunk cache: every write covers whole chunks (but the last), which go straight to disk.
  HDF5_CHECK(access_props.Reset(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose));
  HDF5_CHECK(H5Pset_chunk_cache(access_props.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT));
  hid_t file_type = writer->token_bytes_ == 2 ? H5T_STD_U16LE : H5T_STD_U32LE;
  HDF5_CHECK(writer->tokens_.Reset(H5Dcreate2(writer->file_.get(), "tokens", file_type, space.get(),
                                              H5P_DEFAULT, create_props.get(), access_props.get()),
                                   H5Dclose));
  writer->offsets_buffer_.resize(static_cast<size_t>(kOffsetChunk));
  if (info.loss_mask) {
    writer->mask_buffer_.resize(static_cast<size_t>(writer->chunk_tokens_));
    HDF5_CHECK(
        writer->mask_.Reset(H5Dcreate2(writer->file_.get(), "loss_mask", H5T_STD_U8LE, space.get(),
                                       H5P_DEFAULT, create_props.get(), access_props.get()),
                            H5Dclose));
  }
  return writer;
}

Status TokenFileWriter::Append(const uint32_t* tokens, size_t count, const uint8_t* mask) {
  size_t i = 0;
  while (i < count) {
    size_t room = static_cast<size_t>(chunk_tokens_ - buffered_);
    size_t n = std::min(room, count - i);
    if (token_bytes_ == 2) {
      auto* out = reinterpret_cast<uint16_t*>(buffer_.data()) + buffered_;
      for (size_t k = 0; k < n; ++k) out[k] = static_cast<uint16_t>(tokens[i + k]);
    } else {
      std::memcpy(reinterpret_cast<uint32_t*>(buffer_.data()) + buffered_, tokens + i, n * 4);
    }
    if (info_.loss_mask) {
      uint8_t* out = mask_buffer_.data() + buffered_;
      if (mask)
        std::memcpy(out, mask + i, n);
      else
        std::memset(out, 0, n);
    }
    buffered_ += static_cast<int64_t>(n);
    i += n;
    if (buffered_ == chunk_tokens_) TRAINER_RETURN_IF_ERROR(WriteBuffer());
  }
  return Status::Ok();
}

Status TokenFileWriter::WriteBuffer() {
  if (buffered_ == 0) return Status::Ok();
  hsize_t new_size[1] = {static_cast<hsize_t>(written_ + buffered_)};
  HDF5_CHECK(H5Dset_extent(tokens_.get(), new_size));
  TRAINER_RETURN_IF_ERROR(
      Hdf5WriteRange1D(tokens_.get(), written_, buffered_, mem_type_, buffer_.data()));
  if (info_.loss_mask) {
    HDF5_CHECK(H5Dset_extent(mask_.get(), new_size));
    TRAINER_RETURN_IF_ERROR(
        Hdf5WriteRange1D(mask_.get(), written_, buffered_, H5T_NATIVE_UINT8, mask_buffer_.data()));
  }
  written_ += buffered_;
  buffered_ = 0;
  return Status::Ok();
}

Status TokenFileWriter::Flush() {
  return WriteBuffer();
}

Status TokenFileWriter::AddDocumentStart(uint64_t start) {
  TRAINER_ASSERT(num_documents() == 0 ? start == 0 : start >= last_start_,
                 "document starts must begin at 0 and rise");
  last_start_ = start;
  offsets_buffer_[static_cast<size_t>(offsets_buffered_++)] = start;
  return offsets_buffered_ == kOffsetChunk ? WriteOffsets(/*last=*/false) : Status::Ok();
}

Status TokenFileWriter::WriteOffsets(bool last) {
  // Made at the first write: a file whose starts fit one buffer gets a dataset of their size;
  // a larger one an extendible dataset of buffer-sized chunks.
  const bool whole = offsets_.get() < 0 && last;
  if (offsets_.get() < 0) {
    hsize_t size[1] = {whole ? static_cast<hsize_t>(offsets_buffered_) : 0};
    hsize_t max_dims[1] = {whole ? size[0] : H5S_UNLIMITED};
    hsize_t chunk[1] = {static_cast<hsize_t>(kOffsetChunk)};
    Hdf5Handle space, create_props;
    HDF5_CHECK(space.Reset(H5Screate_simple(1, size, max_dims), H5Sclose));
    HDF5_CHECK(create_props.Reset(H5Pcreate(H5P_DATASET_CREATE), H5Pclose));
    if (!whole) {
      HDF5_CHECK(H5Pset_chunk(create_props.get(), 1, chunk));
      HDF5_CHECK(H5Pset_fill_time(create_props.get(), H5D_FILL_TIME_NEVER));
    }
    HDF5_CHECK(offsets_.Reset(H5Dcreate2(file_.get(), "doc_offsets", H5T_STD_U64LE, space.get(),
                                         H5P_DEFAULT, create_props.get(), H5P_DEFAULT),
                              H5Dclose));
  }
  if (offsets_buffered_ == 0) return Status::Ok();
  if (!whole) {
    hsize_t new_size[1] = {static_cast<hsize_t>(offsets_written_ + offsets_buffered_)};
    HDF5_CHECK(H5Dset_extent(offsets_.get(), new_size));
  }
  TRAINER_RETURN_IF_ERROR(Hdf5WriteRange1D(offsets_.get(), offsets_written_, offsets_buffered_,
                                           H5T_NATIVE_UINT64, offsets_buffer_.data()));
  offsets_written_ += offsets_buffered_;
  offsets_buffered_ = 0;
  return Status::Ok();
}

Status TokenFileWriter::Finish() {
  TRAINER_RETURN_IF_ERROR(Flush());
  TRAINER_ASSERT(num_documents() > 0 && last_start_ <= static_cast<uint64_t>(written_),
                 "a token file needs its first document start, at or before its end");
  // The total: its own entry, or the write of a full buffer (then nothing is left to write).
  TRAINER_RETURN_IF_ERROR(AddDocumentStart(static_cast<uint64_t>(written_)));
  TRAINER_RETURN_IF_ERROR(WriteOffsets(/*last=*/true));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(file_.get(), "format_version", kDataFormatVersion));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(file_.get(), "vocab_size", info_.vocab_size));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(file_.get(), "eod_id", info_.eod_id));
  TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(file_.get(), "tokenizer", info_.tokenizer));
  if (info_.loss_mask) {
    TRAINER_RETURN_IF_ERROR(Hdf5WriteStringAttribute(mask_.get(), "format", kLossMaskFormat));
    HDF5_CHECK(mask_.Close());
  }
  HDF5_CHECK(offsets_.Close());
  HDF5_CHECK(tokens_.Close());
  if (file_.Close() < 0) {
    return DataError("cannot finish output file (" + path_ + "): " + Hdf5ErrorText() +
                     ". Check the free space of the --output folder");
  }
  return Status::Ok();
}

Status SplitTokenWriter::Append(const uint32_t* tokens, size_t count, const uint8_t* mask) {
  while (count > 0) {
    size_t n = count;
    TokenFileWriter* target = val_;
    if (position_ < cut_) {
      n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(count), cut_ - position_));
      target = train_;
    }
    TRAINER_RETURN_IF_ERROR(target->Append(tokens, n, mask));
    if (mask) trained_[target == train_ ? 0 : 1] += std::count(mask, mask + n, uint8_t{1});
    tokens += n;
    if (mask) mask += n;
    count -= n;
    position_ += static_cast<int64_t>(n);
  }
  return Status::Ok();
}

Status SplitTokenWriter::StartDocument(int64_t start) {
  if (start < cut_) return train_->AddDocumentStart(static_cast<uint64_t>(start));
  if (start > cut_) return val_->AddDocumentStart(static_cast<uint64_t>(start - cut_));
  return Status::Ok();
}

}  // namespace trainer
