// TensorBoardWriter: scalars in TensorBoard's event-file format, so `tensorboard --logdir
// <Engine.output_dir>/tensorboard` plots what metrics.jsonl holds. An event file is a sequence of
// TFRecords (length, masked CRC-32C of the length, an Event protobuf, masked CRC-32C of it); the
// few protobuf fields needed (Event.wall_time/step/file_version/summary/session_log,
// Summary.Value.tag and simple_value, SessionLog.status) are encoded here by hand, so no protobuf
// library is needed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace trainer {

// The error of a failed write under Engine.output_dir (metrics.jsonl, the event file): the file,
// the key, the reason and what to do.
Status OutputWriteError(const std::string& path, int error_number);

// CRC-32C (Castagnoli), as TFRecord framing uses it.
uint32_t Crc32c(const void* data, size_t bytes);

class TensorBoardWriter {
 public:
  // <folder>/events.out.tfevents.<seconds>.<host>, created with its file_version record at the
  // first write (a run with nothing to train leaves no file); `folder` made and writable.
  static Status Open(const std::string& folder, std::unique_ptr<TensorBoardWriter>* out);
  ~TensorBoardWriter();
  // One event at `step` with a scalar per (tag, value).
  Status WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  // A SessionLog START event at `step`, which every run writes first: from the second one of a
  // log folder on, TensorBoard drops what earlier events hold for steps >= `step` (its purge of
  // orphaned data), the steps a resumed run logs again; it takes the first as a session's start.
  Status WriteSessionStart(int64_t step);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter() = default;
  Status WriteRecord(const std::string& event);
  Status Create();

  FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace trainer
