// MetricsWriter: metrics.jsonl in Engine.output_dir (one JSON object per line, snake_case keys),
// written by rank 0, and the same scalars for TensorBoard under <output_dir>/tensorboard
// (Engine.tensorboard). Appends; a run that resumes at step S first moves what the interrupted
// run logged after S to metrics.jsonl.superseded (StartAt), so that no step appears twice. A run
// that goes back to an earlier step moves the line it left only once it commits a checkpoint or
// ends (StartBranch, SettleBranch), as the step folders are set aside.
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
  // A run's start at `step` (its checkpoint's; 0 for a fresh run) on the line of training the
  // folder's metrics.jsonl logs: moves the records of later steps (and a line torn by a crash),
  // and what a run that went back committed nothing of (StartBranch) logged, to
  // metrics.jsonl.superseded, rewriting the file atomically; marks TensorBoard's restart at
  // step + 1 (TensorBoardWriter::WriteSessionStart).
  // `resumed_file` (the checkpoint.h5 resumed, "" for a fresh start): written after a run went
  // back (metrics.jsonl.branch), it is that run's, which stopped before settling: settled first.
  Status StartAt(int64_t step, const std::string& resumed_file = "");
  // A run gone back to `step` below the folder's newest checkpoint: the records after `step`
  // belong to the line it leaves, but stay until it commits a checkpoint (SettleBranch); ended
  // or killed before, its own records are the ones the next start moves (metrics.jsonl.branch
  // holds where they begin).
  Status StartBranch(int64_t step);
  // After this run's first committed checkpoint: StartBranch's move, once.
  Status SettleBranch();
  // Whether metrics.jsonl holds a val_loss record of `step` (false where this rank writes none).
  bool HasValLoss(int64_t step);
  // {"step": 3, "loss": 4.2, ...} in the given order; values printed with %.6g unless integral.
  Status Write(const std::vector<std::pair<std::string, double>>& record);
  // A JSON value (an object, e.g. the GPU routes) added as `key` to the next record written to
  // metrics.jsonl (not to TensorBoard, which takes scalars).
  void AddToNextRecord(const std::string& key, const std::string& json) {
    pending_ += ", \"" + key + "\": " + json;
  }

 private:
  MetricsWriter() = default;
  // Rewrites metrics.jsonl without the records before byte `boundary` of steps after `step`
  // (and torn lines) and, where move_from_boundary, those from it on; they go to
  // metrics.jsonl.superseded, and one line says how many and `which`.
  Status MoveRecords(int64_t step, size_t boundary, bool move_from_boundary,
                     const std::string& which);
  FILE* file_ = nullptr;
  std::string path_;
  std::string pending_;       // AddToNextRecord's fields
  int64_t branch_step_ = -1;  // StartBranch's step, until SettleBranch
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace trainer
