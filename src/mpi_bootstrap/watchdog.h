// Watchdog: turns a stuck collective into an error instead of a silent hang. The training loop
// reports progress (Beat, naming what it is about to do); a thread checks that the last beat is
// younger than the timeout, and otherwise prints one line naming the phase, rank and host and
// ends this process at once with exit code 1 (std::_Exit: no MPI call from this thread, which
// MPI_THREAD_FUNNELED forbids). The launcher then ends every other rank: mpirun does when a rank
// exits non-zero, srun with --kill-on-bad-exit (slurm/train.sbatch passes it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace trainer {

class Watchdog {
 public:
  // timeout_seconds <= 0 disables it.
  explicit Watchdog(double timeout_seconds);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Progress: `phase` (a string literal) names the work that starts now.
  void Beat(const char* phase);

 private:
  void Run();

  double timeout_;
  std::atomic<const char*> phase_{"start-up"};
  std::atomic<double> last_beat_{0};
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace trainer
