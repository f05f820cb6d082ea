// Preemption signal handlers (signals.h).
#include "engine/signals.h"

#include <csignal>

namespace trainer {
namespace {
volatile std::sig_atomic_t g_signal = 0;
void Handle(int signal) {
  g_signal = signal;
}
}  // namespace

void InstallPreemptionHandlers() {
  struct sigaction action {};
  action.sa_handler = Handle;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

bool PreemptionRequested() {
  return g_signal != 0;
}
int PreemptionSignal() {
  return g_signal;
}

}  // namespace trainer
