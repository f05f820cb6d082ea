// Progress: what long library work reports as it goes (a checkpoint's verification, load and
// save, tensor by tensor; the wait for a checkpoint folder's lock), for whoever watches the run.
// The training run's watchdog (mpi_bootstrap/watchdog.h) counts each report as a beat; library
// code takes a Progress* (nullptr: nobody watches) and knows nothing of the watcher.
#pragma once

namespace trainer {

class Progress {
 public:
  virtual ~Progress() = default;
  // Work goes on; `phase` (a string literal) names it. Callable from any thread.
  virtual void Beat(const char* phase) = 0;
  // This rank now waits in a collective for `phase`, work of world rank 0 that rank 0 reports
  // to its own watcher: no beat is due here until the next Beat. (A stall of rank 0 stops rank 0,
  // and the launcher then ends this rank.)
  virtual void AwaitRoot(const char* phase) = 0;
};

inline void ReportProgress(Progress* progress, const char* phase) {
  if (progress != nullptr) progress->Beat(phase);
}
// AwaitRoot on every rank but world rank 0.
inline void AwaitRoot(Progress* progress, int world_rank, const char* phase) {
  if (progress != nullptr && world_rank != 0) progress->AwaitRoot(phase);
}

}  // namespace trainer
