// Asynchronous checkpoint saves (Checkpoint.async_save): at the save step every rank copies its
// state to host memory and the shards are gathered to rank 0 on the calling thread (all MPI stays
// on the main thread: the runtime is MPI_THREAD_FUNNELED); rank 0's background thread then writes
// step-N.tmp, fsyncs, renames and replaces `latest` exactly as a synchronous save does, while
// training goes on. One save at a time: a new one, the end of training and a preemption first
// finish the one in flight. A SIGKILL during the background write leaves `latest` on the previous
// checkpoint, as during a synchronous save.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>

#include "checkpoint/checkpoint.h"

namespace trainer {

// The background writer needs an HDF5 built thread-safe (Debian's is), since the training data is
// read through HDF5 at the same time; without one, saves stay synchronous.
bool AsyncCheckpointSavesSupported();

class AsyncCheckpointSaver {
 public:
  explicit AsyncCheckpointSaver(const ParallelGroups& groups) : groups_(groups) {}
  // Rank 0: waits for a write in flight (WaitForWrite).
  ~AsyncCheckpointSaver();
  // Rank 0, no communication: waits for a write in flight, so that a run stopping on an error
  // still commits the last good state before the process ends (a failed write is logged as a
  // warning). Other ranks: nothing.
  void WaitForWrite();
  AsyncCheckpointSaver(const AsyncCheckpointSaver&) = delete;
  AsyncCheckpointSaver& operator=(const AsyncCheckpointSaver&) = delete;

  // Sizes the host copy of this rank's state ahead of the first save (ReserveCheckpointSnapshot).
  void Reserve(GptModel* model, const AdamW& optimizer) {
    ReserveCheckpointSnapshot(model, optimizer, groups_.world_rank, &snapshot_);
  }
  // Collective over the world; no save may be in flight (Finish it first). Gathers the state into
  // rank 0's host snapshot and starts its write there.
  Status Start(const CheckpointWriteRequest& request, GptModel* model, AdamW* optimizer);
  // A save was started and not finished (the same on every rank).
  bool pending() const { return pending_; }
  // Rank 0: its background write has ended (well or not), so Finish will not wait. Other ranks:
  // false (rank 0's answer reaches them through the training loop's per-step all-reduce).
  bool WriteDone() const;
  // Collective over the world when pending(): waits for rank 0's write and shares its outcome.
  // While rank 0 waits, the request's progress hears of each tensor the writer writes (not
  // while training goes on: a stuck training step must not look like progress); the other
  // ranks await rank 0.
  // A failed write is every rank's checkpoint error (rank 0's carries the one-line message).
  // report: the committed folder (every rank), its bytes and the write's seconds (rank 0).
  Status Finish(CheckpointSaveReport* report);

 private:
  const ParallelGroups& groups_;
  CheckpointSnapshot snapshot_;
  std::future<Status> write_;  // rank 0
  // The writer's progress: counts its tensors, read by Finish's wait.
  class WriterProgress : public Progress {
   public:
    void Beat(const char*) override { ++beats; }
    void AwaitRoot(const char*) override {}
    std::atomic<int64_t> beats{0};
  };
  WriterProgress writer_progress_;
  // Rank 0: waits for the writer's thread, telling progress_ of each tensor it writes.
  void AwaitWriter();
  Progress* progress_ = nullptr;  // the request's, told of the writer's progress in Finish
  CheckpointSaveReport written_;
  bool pending_ = false;
};

}  // namespace trainer
