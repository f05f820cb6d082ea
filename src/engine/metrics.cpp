// MetricsWriter (metrics.h).
#include "engine/metrics.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
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

// metrics.jsonl.branch: "<byte offset> <step>" while a run gone back to <step> has committed
// nothing; its own records begin at the offset.
std::string BranchPath(const std::string& path) {
  return path + ".branch";
}

// The offset in metrics.jsonl where a run that went back began appending (npos: none, or a
// record that does not fit the file as it is), and the step it went back to.
size_t BranchStart(const std::string& path, int64_t* branch_step = nullptr) {
  auto text = ReadSmallFile(BranchPath(path));
  long long offset = -1, step = -1;
  if (!text.ok() || std::sscanf(text.value().c_str(), "%lld %lld", &offset, &step) != 2 ||
      offset < 0 || offset > FileSize(path))
    return std::string::npos;
  if (branch_step != nullptr) *branch_step = step;
  return static_cast<size_t>(offset);
}

// Whether file `a` was last written after file `b` (both exist).
bool WrittenAfter(const std::string& a, const std::string& b) {
  struct stat x, y;
  if (stat(a.c_str(), &x) != 0 || stat(b.c_str(), &y) != 0) return false;
  return x.st_mtim.tv_sec != y.st_mtim.tv_sec ? x.st_mtim.tv_sec > y.st_mtim.tv_sec
                                              : x.st_mtim.tv_nsec > y.st_mtim.tv_nsec;
}

}  // namespace

Status MetricsWriter::MoveRecords(int64_t step, size_t boundary, bool move_from_boundary,
                                  const std::string& which) {
  std::fflush(file_);
  TRAINER_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path_));
  std::string kept, moved;
  size_t count = 0;
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    const int64_t record_step = RecordStep(line);
    const bool past = at >= boundary ? move_from_boundary : record_step < 0 || record_step > step;
    count += past;
    (past ? moved : kept) += line + '\n';
  }
  if (count == 0) return Status::Ok();
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
  LogInfo(StrFormat("%s: %zu record(s) %s moved to %s", path_.c_str(), count, which.c_str(),
                    aside.c_str()));
  return Status::Ok();
}

Status MetricsWriter::StartAt(int64_t step, const std::string& resumed_file) {
  if (tensorboard_) TRAINER_RETURN_IF_ERROR(tensorboard_->WriteSessionStart(step + 1));
  if (file_ == nullptr) return Status::Ok();
  // A checkpoint written after a run went back is that run's: it committed and stopped before
  // settling (a kill in the step after an asynchronous save). Settle now, then resume on it.
  int64_t branch_step = -1;
  const size_t branch = BranchStart(path_, &branch_step);
  if (branch != std::string::npos && !resumed_file.empty() &&
      WrittenAfter(resumed_file, BranchPath(path_))) {
    branch_step_ = branch_step;
    TRAINER_RETURN_IF_ERROR(SettleBranch());
  }
  const std::string which =
      step == 0 ? "of an earlier run that committed no checkpoint here,"
                : StrFormat(
                      "after step %lld (logged past this checkpoint) or of a run that went "
                      "back and committed no checkpoint,",
                      static_cast<long long>(step));
  TRAINER_RETURN_IF_ERROR(MoveRecords(step, BranchStart(path_), true, which));
  return RemoveTree(BranchPath(path_));
}

Status MetricsWriter::StartBranch(int64_t step) {
  if (tensorboard_) TRAINER_RETURN_IF_ERROR(tensorboard_->WriteSessionStart(step + 1));
  if (file_ == nullptr) return Status::Ok();
  // A torn last line, and what an earlier run gone back that committed nothing logged.
  TRAINER_RETURN_IF_ERROR(MoveRecords(std::numeric_limits<int64_t>::max(), BranchStart(path_), true,
                                      "torn by a crash, or of a run that went back and committed "
                                      "no checkpoint,"));
  branch_step_ = step;
  return WriteFileAtomically(
      BranchPath(path_), StrFormat("%lld %lld\n", FileSize(path_), static_cast<long long>(step)));
}

Status MetricsWriter::SettleBranch() {
  if (branch_step_ < 0 || file_ == nullptr) return Status::Ok();
  const int64_t step = branch_step_;
  branch_step_ = -1;
  TRAINER_RETURN_IF_ERROR(
      MoveRecords(step, BranchStart(path_), false,
                  StrFormat("after step %lld, of the line of training this run went back from,",
                            static_cast<long long>(step))));
  return RemoveTree(BranchPath(path_));
}

bool MetricsWriter::HasValLoss(int64_t step) {
  if (file_ == nullptr || std::fflush(file_) != 0) return false;
  StatusOr<std::string> read = ReadSmallFile(path_);
  if (!read.ok()) return false;
  const std::string& text = read.value();
  const std::string record =
      StrFormat("{\"step\": %lld, \"val_loss\": ", static_cast<long long>(step));
  for (size_t at = 0; at < text.size();) {
    if (text.compare(at, record.size(), record) == 0) return true;
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return false;
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
