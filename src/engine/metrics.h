// MetricsWriter: metrics.jsonl in Engine.output_dir (one JSON object per line, snake_case keys),
// written by rank 0, and the same scalars for TensorBoard under <output_dir>/tensorboard
// (Engine.tensorboard). Appends; a run that resumes at step S first moves what the interrupted
// run logged after S to metrics.jsonl.superseded (StartAt), so that no step appears twice.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/tensorboard.h"

namespace trainer {

// Rank 0 at start: Engine.output_dir made and writable, else a usage error (exit 2) naming it.
Status CheckOutputFolder(const std::string& output_dir);

class MetricsWriter {
 public:
  static Status Open(const std::string& output_dir, bool enabled, bool tensorboard,
                     std::unique_ptr<MetricsWriter>* out);
  ~MetricsWriter();
  // A resumed run's start at `step` (its checkpoint's, > 0): moves the metrics.jsonl records of
  // later steps (and a line torn by a crash) to metrics.jsonl.superseded, rewriting the file
  // atomically, and marks TensorBoard's restart at step + 1 (TensorBoardWriter::WriteSessionStart).
  Status StartAt(int64_t step);
  // A fresh run's start: TensorBoard's session start at step 1 (metrics.jsonl is left as it is).
  Status StartFresh();
  // {"step": 3, "loss": 4.2, ...} in the given order; values printed with %.6g unless integral.
  Status Write(const std::vector<std::pair<std::string, double>>& record);
  // A JSON value (an object, e.g. the GPU routes) added as `key` to the next record written to
  // metrics.jsonl (not to TensorBoard, which takes scalars).
  void AddToNextRecord(const std::string& key, const std::string& json) {
    pending_ += ", \"" + key + "\": " + json;
  }

 private:
  MetricsWriter() = default;
  FILE* file_ = nullptr;
  std::string path_;
  std::string pending_;  // AddToNextRecord's fields
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace trainer
