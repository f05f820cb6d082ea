// Preemption signals (Slurm's --signal=USR1@120, SIGTERM before a kill, or Ctrl-C): the handler
// only sets a flag; the training loop agrees on it across ranks at a step boundary, saves, and
// exits 75. A second SIGINT ends the process at once (the default action), without a checkpoint.
#pragma once

namespace trainer {

// SIGTERM, SIGUSR1 and SIGINT. With `announce_interrupt` (rank 0) the first SIGINT prints one
// line to stderr saying what happens next.
void InstallPreemptionHandlers(bool announce_interrupt = false);
bool PreemptionRequested();
// The signal number that was received (0 if none), for the log line.
int PreemptionSignal();
// "SIGINT (Ctrl-C)", "SIGTERM", "SIGUSR1", or "" when this process received none.
const char* PreemptionSignalName();

}  // namespace trainer
