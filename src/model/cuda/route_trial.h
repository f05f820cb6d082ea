// RouteTrial: one GEMM shape's choice among interchangeable implementations (candidates, e.g.
// cuBLASLt's epilogue or our sm90 kernel), made from the times of the shape's own calls in the
// run's first step. Back-to-back runs on a shape's first call rank the candidates on a GPU that is
// not yet at its power limit; in the step they run among the step's other kernels, the way they
// will run for the rest of the run.
//
// The first call runs every candidate once, untimed (library tuning and plan builds happen there),
// and notes those that refuse the shape; the next candidates x trials_each calls run the
// candidates in turn, each between two CUDA events; the call that completes them reads the events
// (one event synchronisation) and keeps the candidate with the least mean time. Every call's
// outputs are those of one candidate's run: the candidates must be interchangeable and must not
// read what they write (running one after another on the first call leaves the same result).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "common/status.h"

namespace trainer {
namespace cuda {

class RouteTrial {
 public:
  RouteTrial(int candidates, int trials_each);
  ~RouteTrial();
  RouteTrial(const RouteTrial&) = delete;
  RouteTrial& operator=(const RouteTrial&) = delete;

  struct CallResult {
    int output = -1;           // the candidate whose run left this call's outputs; -1: none
    bool refused = false;      // the candidate this call had to run refused it (a launch error
                               // or a candidate that ran before and no longer does)
    bool decided_now = false;  // this call ended the trial (log mean_ms() now)
  };
  // One call of the shape: runs what the trial needs through run(c) (true: accepted).
  Status Call(cudaStream_t stream, const std::function<bool(int)>& run, CallResult* result);

  bool decided() const { return decided_; }
  int choice() const { return choice_; }  // once decided; -1 when every candidate refused
  int candidates() const { return candidates_; }
  bool refused(int c) const { return !refused_.empty() && refused_[c]; }
  float mean_ms(int c) const { return mean_ms_.empty() ? -1.f : mean_ms_[c]; }

 private:
  Status Decide();

  int candidates_, trials_each_;
  bool decided_ = false;
  int choice_ = -1;
  int calls_ = 0;
  int last_accepted_ = -1;           // the highest-numbered candidate that ran on the first call
  std::vector<bool> refused_;        // per candidate, on the first call
  std::vector<cudaEvent_t> events_;  // (start, stop) of each timed call
  std::vector<float> mean_ms_;
};

}  // namespace cuda
}  // namespace trainer
