// Watchdog: turns a stuck collective into an error instead of a silent hang. The training loop,
// and the checkpoint's lock wait, verification, load and save tensor by tensor, report progress
// (Beat, naming what goes on); a thread checks that the last beat is younger than the timeout
// (kRootWaitFactor times it while the rank waits for rank 0's work, AwaitRoot: rank 0's own
// watchdog times that work, and the longer bound stands where rank 0's process cannot end
// itself: stopped, or its host cut off). Otherwise it prints one line naming the phase, rank
// and host and ends this process at once with exit code 1 (std::_Exit: no MPI call from this
// thread, which MPI_THREAD_FUNNELED forbids). The launcher then ends every other rank: mpirun
// does when a rank exits non-zero, srun with --kill-on-bad-exit (slurm/train.sbatch passes it).
// Each period the thread also asks the registered asynchronous error sources (NCCL's
// communicators, which learn of a dead peer or a broken link while a kernel waits on it): a
// reported error ends the process the same way at once, with the source's line, instead of
// after the timeout with no reason.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "common/progress.h"

namespace trainer {

// Something that learns of failures on its own, between calls.
class AsyncErrorSource {
 public:
  virtual ~AsyncErrorSource() = default;
  // "" while healthy; otherwise one line naming the source, the error and what to do. Called
  // from the watchdog's thread.
  virtual std::string AsyncError() = 0;
};

// Every live watchdog asks `source` from now until it is unregistered (before it is destroyed;
// unregistering waits for a question under way).
void RegisterAsyncErrorSource(AsyncErrorSource* source);
void UnregisterAsyncErrorSource(AsyncErrorSource* source);

class Watchdog : public Progress {
 public:
  // timeout_seconds <= 0 disables it.
  explicit Watchdog(double timeout_seconds);
  // Another timeout from now on (the configured one, once the config is read); <= 0 disables.
  void SetTimeout(double timeout_seconds);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Progress: `phase` (a string literal) names the work that goes on or starts now.
  void Beat(const char* phase) override;
  // A wait for rank 0's work (Progress::AwaitRoot): timed against kRootWaitFactor x the timeout
  // until the next Beat.
  void AwaitRoot(const char* phase) override;
  static constexpr double kRootWaitFactor = 10;

 private:
  void Run();

  std::atomic<double> timeout_;
  std::atomic<const char*> phase_{"start-up"};
  std::atomic<double> last_beat_{0};
  std::atomic<bool> awaiting_root_{false};
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace trainer
