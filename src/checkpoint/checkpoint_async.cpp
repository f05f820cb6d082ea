// Asynchronous checkpoint saves (checkpoint_async.h).
#include "checkpoint/checkpoint_async.h"

#include <hdf5.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "common/check.h"
#include "common/log.h"

namespace trainer {
namespace {
// The writer's nice value: its checksums and copies into the page cache take the cores that
// training leaves idle, rather than slowing the steps (a CPU run's compute, a GPU run's launches
// and data prefetch). Linux gives each thread its own nice value; the CRC thread inherits it.
constexpr int kWriterNice = 10;
}  // namespace

SnapshotBuffer::~SnapshotBuffer() {
  if (locked_ != nullptr) backend_->FreeHost(locked_);
}

void SnapshotBuffer::Reserve(Backend* backend, size_t elements, std::string* refusal) {
  if (elements <= size_) return;
  if (locked_ != nullptr) backend_->FreeHost(locked_);
  locked_ = nullptr;
  backend_ = backend;
  void* p = nullptr;
  // Only a GPU's copies gain from page-locked memory; a CPU backend's would count the copy in
  // its allocator's high-water mark, which is held against trainer plan's arena.
  const Status s = backend->device_memory()
                       ? backend->AllocateHost(elements * sizeof(float), &p)
                       : Status(ExitCode::kRuntime, "");
  if (s.ok()) {
    locked_ = static_cast<float*>(p);
    std::vector<float>().swap(ordinary_);
  } else {
    if (!s.message().empty()) *refusal = s.message();
    ordinary_.resize(elements);
  }
  size_ = elements;
}

void ReserveCheckpointSnapshot(GptModel* model, const AdamW& optimizer, int world_rank,
                               CheckpointSnapshot* snapshot) {
  std::string refusal;
  for (SnapshotBuffer& buffer : snapshot->state)
    buffer.Reserve(model->backend(), optimizer.DownloadElements(), &refusal);
  if (!refusal.empty() && world_rank == 0)
    LogWarning("Checkpoint.async_save: " + refusal +
               "; the state's host copy uses ordinary memory instead, so each save holds "
               "training up for longer (raise `ulimit -l`, or free host memory)");
}

bool AsyncCheckpointSavesSupported() {
  hbool_t threadsafe = 0;
  return H5is_library_threadsafe(&threadsafe) >= 0 && threadsafe;
}

AsyncCheckpointSaver::~AsyncCheckpointSaver() { WaitForWrite(); }

void AsyncCheckpointSaver::AwaitWriter() {
  // A beat whenever the writer has written more tensors since the last look.
  int64_t seen = writer_progress_.beats;
  ReportProgress(progress_, "a checkpoint write");
  while (write_.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
    const int64_t now = writer_progress_.beats;
    if (now != seen) ReportProgress(progress_, "a checkpoint write");
    seen = now;
  }
}

void AsyncCheckpointSaver::WaitForWrite() {
  if (!write_.valid()) return;
  AwaitWriter();
  const Status s = write_.get();
  if (!s.ok()) LogWarning("the checkpoint written in the background failed: " + s.message());
}

Status AsyncCheckpointSaver::Start(const CheckpointWriteRequest& request, GptModel* model,
                                   AdamW* optimizer) {
  TRAINER_ASSERT(!pending_, "a checkpoint save is already in flight");
  TRAINER_RETURN_IF_ERROR(
      GatherCheckpointCollective(request, model, optimizer, groups_, &snapshot_));
  pending_ = true;
  progress_ = request.progress;
  snapshot_.request.progress = &writer_progress_;  // the writer's thread reports to the counter
  written_ = CheckpointSaveReport{};
  written_.path = request.directory + "/" + CheckpointFolderName(request.step);
  if (groups_.world_rank == 0)
    write_ = std::async(std::launch::async, [this] {
      (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);
      return WriteCheckpointSnapshot(snapshot_, &written_);
    });
  return Status::Ok();
}

bool AsyncCheckpointSaver::WriteDone() const {
  return write_.valid() && write_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

Status AsyncCheckpointSaver::Finish(CheckpointSaveReport* report) {
  if (!pending_) return Status::Ok();
  pending_ = false;
  Status status;
  if (write_.valid()) {
    AwaitWriter();
    status = write_.get();
  }
  AwaitRoot(progress_, groups_.world_rank, "rank 0's checkpoint write");
  int code = status.exit_code();
  TRAINER_RETURN_IF_ERROR(groups_.world_host->Broadcast(&code, 1, DType::kI32, 0));
  if (code != 0) return groups_.world_rank == 0 ? status : Status(static_cast<ExitCode>(code), "");
  *report = written_;
  return Status::Ok();
}

}  // namespace trainer
