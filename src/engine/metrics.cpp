// MetricsWriter (metrics.h).
#include "engine/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/filesystem.h"
#include "common/log.h"

namespace trainer {

Status CheckOutputFolder(const std::string& output_dir) {
  std::string why;
  if (FolderWritable(output_dir, &why)) return Status::Ok();
  const ProcessIdentity& id = GetProcessIdentity();
  return UsageError(
      StrFormat("output folder not writable (%s, Engine.output_dir, rank %d on %s): %s. Set "
                "Engine.output_dir to a folder this run can write (metrics.jsonl and, by default, "
                "checkpoints/ go there); nothing was trained",
                output_dir.c_str(), id.rank, id.host.c_str(), why.c_str()));
}

Status MetricsWriter::Open(const std::string& output_dir, bool enabled, bool tensorboard,
                           std::unique_ptr<MetricsWriter>* out) {
  std::unique_ptr<MetricsWriter> w(new MetricsWriter());
  if (enabled) {
    TRAINER_RETURN_IF_ERROR(MakeDirectories(output_dir));
    w->path_ = output_dir + "/metrics.jsonl";
    w->file_ = std::fopen(w->path_.c_str(), "a");
    if (w->file_ == nullptr)
      return RuntimeError(
          StrFormat("cannot open %s for appending: %s (Engine.output_dir). "
                    "Choose a writable Engine.output_dir",
                    w->path_.c_str(), std::strerror(errno)));
    if (tensorboard)
      TRAINER_RETURN_IF_ERROR(
          TensorBoardWriter::Open(output_dir + "/tensorboard", &w->tensorboard_));
  }
  *out = std::move(w);
  return Status::Ok();
}

namespace {

// The step of a metrics.jsonl line, {"step": N, ...}; -1 for a line a crash tore (no closing
// brace) or one without a step.
int64_t RecordStep(const std::string& line) {
  const std::string key = "{\"step\": ";
  if (line.compare(0, key.size(), key) != 0 || line.empty() || line.back() != '}') return -1;
  char* end = nullptr;
  const long long step = std::strtoll(line.c_str() + key.size(), &end, 10);
  return end != line.c_str() + key.size() && (*end == ',' || *end == '}') ? step : -1;
}

}  // namespace

Status MetricsWriter::StartFresh() {
  return tensorboard_ ? tensorboard_->WriteSessionStart(1) : Status::Ok();
}

Status MetricsWriter::StartAt(int64_t step) {
  if (tensorboard_) TRAINER_RETURN_IF_ERROR(tensorboard_->WriteSessionStart(step + 1));
  if (file_ == nullptr) return Status::Ok();
  TRAINER_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path_));
  std::string kept, moved;
  size_t dropped = 0;
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    const int64_t record_step = RecordStep(line);
    const bool past = record_step < 0 || record_step > step;
    dropped += past;
    (past ? moved : kept) += line + '\n';
  }
  if (dropped == 0) return Status::Ok();
  // Kept aside, not lost: a run gone back to an earlier step may return to the line it left.
  const std::string aside = path_ + ".superseded";
  std::string earlier;
  if (PathExists(aside)) {
    TRAINER_ASSIGN_OR_RETURN(earlier, ReadSmallFile(aside));
  }
  TRAINER_RETURN_IF_ERROR(WriteFileAtomically(aside, earlier + moved));
  std::fclose(file_);
  file_ = nullptr;
  TRAINER_RETURN_IF_ERROR(WriteFileAtomically(path_, kept));
  file_ = std::fopen(path_.c_str(), "a");
  if (file_ == nullptr)
    return RuntimeError(StrFormat("cannot open %s for appending: %s (Engine.output_dir)",
                                  path_.c_str(), std::strerror(errno)));
  LogInfo(StrFormat("%s: %zu record(s) after step %lld, logged by the run that went past this "
                    "checkpoint, moved to %s",
                    path_.c_str(), dropped, static_cast<long long>(step), aside.c_str()));
  return Status::Ok();
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

Status MetricsWriter::Write(const std::vector<std::pair<std::string, double>>& record) {
  if (tensorboard_) {  // every value but the step is a scalar named by its key
    int64_t step = 0;
    std::vector<std::pair<std::string, double>> scalars;
    for (const auto& [key, value] : record) {
      if (key == "step")
        step = static_cast<int64_t>(value);
      else
        scalars.emplace_back(key, value);
    }
    TRAINER_RETURN_IF_ERROR(tensorboard_->WriteScalars(step, scalars));
  }
  if (file_ == nullptr) return Status::Ok();
  std::string line = "{";
  for (size_t i = 0; i < record.size(); ++i) {
    const double v = record[i].second;
    std::string value;
    if (!std::isfinite(v))
      value = "null";
    else if (v == std::floor(v) && std::fabs(v) < 1e15)
      value = StrFormat("%.0f", v);
    else
      value = StrFormat("%.8g", v);
    line += (i ? ", \"" : "\"") + record[i].first + "\": " + value;
  }
  line += pending_ + "}\n";
  pending_.clear();
  if (!AppendWholeRecord(file_, line)) return OutputWriteError(path_, errno);
  return Status::Ok();
}

}  // namespace trainer
