// PhaseTimer: where a training step's time goes (Engine.profile), from backend timing marks (CUDA
// events on the GPU): each Charge(phase) books the time since the previous mark to `phase`. The
// report averages over the profiled steps.
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "model/backend.h"

namespace trainer {

enum class Phase { kData, kForward, kBackward, kPipelineTransfer, kGradReduce, kOptimizer, kCount };

class PhaseTimer {
 public:
  // A disabled timer does nothing (no marks, no synchronisation).
  PhaseTimer(Backend* backend, bool enabled) : backend_(backend), enabled_(enabled) {}
  bool enabled() const { return enabled_; }

  Status BeginStep();
  // The time since the previous mark belongs to `phase`.
  Status Charge(Phase phase);
  // Waits for the step's marks and adds their intervals to the totals.
  Status EndStep();

  // "forward 30.1 ms (41%) | backward ..." per step, averaged over the profiled steps.
  std::string Report() const;
  // {"profile_forward_ms": ..., ...} for metrics.jsonl.
  std::vector<std::pair<std::string, double>> Record() const;

 private:
  Status Flush();  // book the pending intervals (also when the marks run out mid-step)

  Backend* backend_;
  bool enabled_;
  int next_mark_ = 0;
  std::vector<Phase> pending_;  // phase of the interval ending at mark i+1
  std::array<double, static_cast<int>(Phase::kCount)> seconds_{};
  int steps_ = 0;
};

}  // namespace trainer
