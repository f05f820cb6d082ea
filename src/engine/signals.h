// Preemption signals (Slurm's --signal=USR1@120, or SIGTERM before a kill): the handler only sets
// a flag; the training loop agrees on it across ranks at a step boundary, saves, and exits 75.
#pragma once

namespace trainer {

void InstallPreemptionHandlers();
bool PreemptionRequested();
// The signal number that was received (0 if none), for the log line.
int PreemptionSignal();

}  // namespace trainer
