// RouteTrial: the route policy (model/route_policy.h) run on the GPU for one shape of one op: its
// candidates (interchangeable implementations, e.g. cuBLASLt's epilogue or our sm90 kernel) timed
// with CUDA events, and the choice. An op drives it one call at a time: over the shape's own calls
// in the run's first step (Call once per call of the shape), or all at once on the shape's first
// call (RunToEnd: the calls back to back).
//
// The first call runs every candidate once, untimed (library tuning and plan builds happen there),
// and notes those that refuse the shape; the next calls run the candidates in turns
// (RouteTurnCandidate), each between two CUDA events; the call that completes the last turn reads
// the events (one event synchronisation) and chooses (RouteTimes, RouteChoice). Every call's
// outputs are those of one candidate's run: the candidates must be interchangeable and must not
// read what they write (running one after another on the first call leaves the same result).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "common/status.h"
#include "model/route_table.h"

namespace trainer {
namespace cuda {

class RouteTrial {
 public:
  explicit RouteTrial(int candidates);
  ~RouteTrial();
  RouteTrial(const RouteTrial&) = delete;
  RouteTrial& operator=(const RouteTrial&) = delete;

  struct CallResult {
    int output = -1;           // the candidate whose run left this call's outputs; -1: none
    bool refused = false;      // the candidate this call had to run refused it (a launch error
                               // or a candidate that ran before and no longer does)
    bool decided_now = false;  // this call ended the trial (record its times now)
  };
  // One call of the shape: runs what the trial needs through run(c) (true: accepted).
  Status Call(cudaStream_t stream, const std::function<bool(int)>& run, CallResult* result);
  // Calls until decided (the candidates back to back on one call of the shape).
  Status RunToEnd(cudaStream_t stream, const std::function<bool(int)>& run);
  // Decided without timing: candidate c (a pinned route).
  void Pin(int c);

  bool decided() const { return decided_; }
  int choice() const { return choice_; }  // once decided; -1 when every candidate refused
  int candidates() const { return candidates_; }
  bool refused(int c) const { return !refused_.empty() && refused_[c]; }
  float time_ms(int c) const { return times_ms_.empty() ? -1.f : times_ms_[c]; }
  // The route table's entry: names[c] with its time, the choice, and how it was made.
  RouteEntry Entry(const std::string& op, const std::string& shape,
                   const std::vector<std::string>& names) const;

 private:
  Status Decide();

  int candidates_;
  bool decided_ = false, pinned_ = false;
  int choice_ = -1;
  int calls_ = 0;
  int last_accepted_ = -1;           // the highest-numbered candidate that ran on the first call
  std::vector<bool> refused_;        // per candidate, on the first call
  std::vector<cudaEvent_t> events_;  // (start, stop) of each timed call
  std::vector<float> times_ms_;
};

}  // namespace cuda
}  // namespace trainer
