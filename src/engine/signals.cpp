// Preemption signal handlers (signals.h).
#include "engine/signals.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

namespace trainer {
namespace {
volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_announce = 0;

constexpr const char kInterrupted[] =
    "\ninterrupted (Ctrl-C): stopping after this step with a checkpoint (exit code 75); "
    "Ctrl-C again quits at once, without one\n";

void Handle(int signal) {
  if (signal == SIGINT && g_signal != 0) {  // a second Ctrl-C (or one after SIGTERM): quit now
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  if (signal == SIGINT && g_announce) {
    ssize_t ignored = write(STDERR_FILENO, kInterrupted, sizeof(kInterrupted) - 1);
    (void)ignored;
  }
  g_signal = signal;
}
}  // namespace

void InstallPreemptionHandlers(bool announce_interrupt) {
  g_announce = announce_interrupt ? 1 : 0;
  struct sigaction action {};
  action.sa_handler = Handle;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool PreemptionRequested() {
  return g_signal != 0;
}
int PreemptionSignal() {
  return g_signal;
}

const char* PreemptionSignalName() {
  switch (g_signal) {
    case SIGINT:
      return "SIGINT (Ctrl-C)";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "";
  }
}

}  // namespace trainer
