// The one route policy of the GPU backend: how an op with interchangeable implementations
// (candidates: cuBLASLt's epilogue, cuDNN's graph, our sm90 kernels, cuBLASLt's algorithms) picks
// one for a shape. Backend-neutral and free of CUDA, so that the decision is tested on the CPU with
// made-up times (tests/unit/route_table_test.cpp); cuda/route_trial.h runs it with CUDA events.
//
// Every op times its candidates the same way:
//   - warm-up: each candidate runs once, untimed (library tuning and plan builds happen there);
//     a candidate whose launch fails there is refused for the shape;
//   - then kTimedRuns turns, each running every candidate once in list order, each run between
//     two CUDA events (read once, when the last turn ends);
//   - a candidate's time is the mean of its timed runs (RouteTime);
//   - the least time wins; a tie goes to the candidate listed first (RouteChoice).
// Where the turns run is the op's: all on the shape's first call, back to back (the GELU GEMM's
// forward, cuBLASLt's algorithms), or over the shape's own calls in the first step, among the
// step's other kernels (the GELU-gradient GEMM, whose ranking back to back differed from the
// step's).
#pragma once

#include <vector>

namespace trainer {

struct RoutePolicy {
  static constexpr int kTimedRuns = 4;  // timed runs of each candidate, after one untimed
};

// Runs of a trial in order: index 0 .. TimedRuns(candidates) - 1 runs candidate
// RouteTurnCandidate(run, candidates).
inline int RouteTimedRuns(int candidates) {
  return candidates * RoutePolicy::kTimedRuns;
}
inline int RouteTurnCandidate(int run, int candidates) {
  return run % candidates;
}

// A candidate's time from its timed runs' milliseconds: their mean (runs < 0, which failed, left
// out); -1 when it has none.
float RouteTime(const std::vector<float>& runs_ms);

// Per candidate, its time from the trial's timed runs (run_ms in run order, RouteTurnCandidate);
// -1 for a refused candidate.
std::vector<float> RouteTimes(const std::vector<bool>& refused, const std::vector<float>& run_ms);

// The candidate with the least time (times < 0: refused or absent); ties go to the lower index;
// -1 when no candidate has a time.
int RouteChoice(const std::vector<float>& times_ms);

}  // namespace trainer
