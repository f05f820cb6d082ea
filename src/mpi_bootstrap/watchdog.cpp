// Watchdog (watchdog.h).
#include "mpi_bootstrap/watchdog.h"

#include <chrono>
#include <cstdlib>

#include "common/log.h"
#include "common/status.h"

namespace trainer {
namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Watchdog::Watchdog(double timeout_seconds) : timeout_(timeout_seconds) {
  last_beat_ = Now();
  if (timeout_ > 0) thread_ = std::thread([this] { Run(); });
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
  awaiting_root_ = true;
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto period = std::chrono::duration<double>(timeout_ < 10 ? timeout_ / 4 : 2.5);
  while (!stopping_) {
    stop_signal_.wait_for(lock, period);
    if (stopping_) return;
    if (awaiting_root_) continue;
    const double idle = Now() - last_beat_;
    if (idle < timeout_) continue;
    const ProcessIdentity& id = GetProcessIdentity();
    LogError(StrFormat(
        "no progress for %.1f s in %s (rank %d on %s, Engine.watchdog_s=%g): a collective is "
        "stuck, most likely because another rank died or the network hangs. Read the other "
        "ranks' errors above; NCCL_DEBUG=WARN or OMPI_MCA_btl_base_verbose=100 say more. If "
        "this phase is just slow (a step, an evaluation or a checkpoint taking longer than "
        "that), raise Engine.watchdog_s",
        idle, phase_.load(), id.rank, id.host.c_str(), timeout_));
    // Not MPI_Abort: MPI runs MPI_THREAD_FUNNELED, so this thread may not call it. The launcher
    // ends the other ranks when one exits non-zero (mpirun does; srun with --kill-on-bad-exit).
    std::_Exit(static_cast<int>(ExitCode::kRuntime));
  }
}

}  // namespace trainer
