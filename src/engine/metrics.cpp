// MetricsWriter (metrics.h).
#include "engine/metrics.h"

#include <cerrno>
#include <cmath>
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
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0)
    return RuntimeError(StrFormat("cannot write %s: %s", path_.c_str(), std::strerror(errno)));
  return Status::Ok();
}

}  // namespace trainer
