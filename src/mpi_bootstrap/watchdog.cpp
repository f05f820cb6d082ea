// Watchdog (watchdog.h).
#include "mpi_bootstrap/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace trainer {
namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::mutex sources_mutex;
std::vector<AsyncErrorSource*>& Sources() {
  static std::vector<AsyncErrorSource*> sources;
  return sources;
}

// The first registered source's error, or "".
std::string FirstAsyncError() {
  std::lock_guard<std::mutex> lock(sources_mutex);
  for (AsyncErrorSource* source : Sources()) {
    std::string error = source->AsyncError();
    if (!error.empty()) return error;
  }
  return "";
}
}  // namespace

void RegisterAsyncErrorSource(AsyncErrorSource* source) {
  std::lock_guard<std::mutex> lock(sources_mutex);
  Sources().push_back(source);
}

void UnregisterAsyncErrorSource(AsyncErrorSource* source) {
  std::lock_guard<std::mutex> lock(sources_mutex);
  std::vector<AsyncErrorSource*>& sources = Sources();
  sources.erase(std::remove(sources.begin(), sources.end(), source), sources.end());
}

Watchdog::Watchdog(double timeout_seconds) : timeout_(timeout_seconds) {
  last_beat_ = Now();
  thread_ = std::thread([this] { Run(); });
}

void Watchdog::SetTimeout(double timeout_seconds) {
  timeout_ = timeout_seconds;
  last_beat_ = Now();
  stop_signal_.notify_all();  // the next look at the new period
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Beat(const char* phase) {
  phase_ = phase;
  last_beat_ = Now();
  awaiting_root_ = false;
}

void Watchdog::AwaitRoot(const char* phase) {
  phase_ = phase;
  last_beat_ = Now();
  awaiting_root_ = true;
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const double timeout = timeout_;  // SetTimeout may change it: one read a look
    stop_signal_.wait_for(
        lock, std::chrono::duration<double>(timeout > 0 && timeout < 10 ? timeout / 4 : 2.5));
    if (stopping_) return;
    const std::string async_error = FirstAsyncError();
    if (!async_error.empty()) {
      LogError(StrFormat("%s (found during %s)", async_error.c_str(), phase_.load()));
      std::_Exit(static_cast<int>(ExitCode::kRuntime));
    }
    const double idle = Now() - last_beat_;
    if (timeout <= 0) continue;  // off
    // Waiting for rank 0, which works meanwhile under its own watchdog: a longer bound.
    const bool root = awaiting_root_;
    if (idle < (root ? kRootWaitFactor : 1) * timeout) continue;
    const ProcessIdentity& id = GetProcessIdentity();
    if (root)
      LogError(StrFormat(
          "no word from rank 0 for %.1f s in %s (rank %d on %s; a wait for rank 0 is given %g x "
          "Engine.watchdog_s=%g): rank 0's own watchdog did not end it, so its process is "
          "stopped or its host cut off. Look at rank 0's host (its process state, the network); "
          "if rank 0's part is just slow (a large checkpoint's verification or write), raise "
          "Engine.watchdog_s",
          idle, phase_.load(), id.rank, id.host.c_str(), kRootWaitFactor, timeout));
    else
      LogError(StrFormat(
          "no progress for %.1f s in %s (rank %d on %s, Engine.watchdog_s=%g): a collective is "
          "stuck, most likely because another rank died or the network hangs. Read the other "
          "ranks' errors above; NCCL_DEBUG=WARN or OMPI_MCA_btl_base_verbose=100 say more. If "
          "this phase is just slow (a step, an evaluation or a checkpoint taking longer than "
          "that), raise Engine.watchdog_s",
          idle, phase_.load(), id.rank, id.host.c_str(), timeout));
    // Not MPI_Abort: MPI runs MPI_THREAD_FUNNELED, so this thread may not call it. The launcher
    // ends the other ranks when one exits non-zero (mpirun does; srun with --kill-on-bad-exit).
    std::_Exit(static_cast<int>(ExitCode::kRuntime));
  }
}

}  // namespace trainer
