// RouteTrial (route_trial.h): the first call's untimed runs, the timed turns, the choice.
#include "model/cuda/route_trial.h"

#include "common/log.h"
#include "model/cuda/cuda_check.h"
#include "model/route_policy.h"

namespace trainer {
namespace cuda {

RouteTrial::RouteTrial(int candidates) : candidates_(candidates) {}

RouteTrial::~RouteTrial() {
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
}

void RouteTrial::Pin(int c) {
  decided_ = pinned_ = true;
  choice_ = c;
}

Status RouteTrial::Call(cudaStream_t stream, const std::function<bool(int)>& run,
                        CallResult* result) {
  *result = CallResult();
  if (decided_) {
    result->output = choice_;
    result->refused = choice_ >= 0 && !run(choice_);
    return Status::Ok();
  }
  if (calls_ == 0) {  // every candidate once, untimed
    refused_.assign(candidates_, true);
    int accepted = 0;
    for (int c = 0; c < candidates_; ++c) {
      refused_[c] = !run(c);
      if (!refused_[c]) last_accepted_ = c, ++accepted;
    }
    cudaGetLastError();  // a refused launch is that candidate's refusal, not the call's error
    result->output = last_accepted_;
    ++calls_;
    if (accepted <= 1) {  // nothing to choose between
      decided_ = result->decided_now = true;
      choice_ = last_accepted_;
      return Status::Ok();
    }
    events_.resize(2 * RouteTimedRuns(candidates_));
    for (cudaEvent_t& event : events_) CUDA_CHECK(cudaEventCreate(&event));
    return Status::Ok();
  }
  const int trial = calls_ - 1;
  const int c = RouteTurnCandidate(trial, candidates_);
  result->output = refused_[c] ? last_accepted_ : c;  // a refused candidate's turn: not counted
  CUDA_CHECK(cudaEventRecord(events_[2 * trial], stream));
  if (!run(result->output)) {
    result->refused = true;
    return Status::Ok();
  }
  CUDA_CHECK(cudaEventRecord(events_[2 * trial + 1], stream));
  if (++calls_ == 1 + RouteTimedRuns(candidates_)) {
    TRAINER_RETURN_IF_ERROR(Decide());
    result->decided_now = true;
  }
  return Status::Ok();
}

Status RouteTrial::RunToEnd(cudaStream_t stream, const std::function<bool(int)>& run) {
  CallResult call;
  while (!decided_) {
    TRAINER_RETURN_IF_ERROR(Call(stream, run, &call));
    if (call.refused) {  // a candidate that ran on the first call and no longer does
      CUDA_CHECK(cudaGetLastError());
      return RuntimeError(
          StrFormat("a route candidate (%d) refused a shape it ran before", call.output));
    }
  }
  return Status::Ok();
}

Status RouteTrial::Decide() {
  CUDA_CHECK(cudaEventSynchronize(events_.back()));
  std::vector<float> run_ms(RouteTimedRuns(candidates_), -1.f);
  for (size_t run = 0; run < run_ms.size(); ++run)
    CUDA_CHECK(cudaEventElapsedTime(&run_ms[run], events_[2 * run], events_[2 * run + 1]));
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
  events_.clear();
  times_ms_ = RouteTimes(refused_, run_ms);
  choice_ = RouteChoice(times_ms_);
  decided_ = true;
  return Status::Ok();
}

RouteEntry RouteTrial::Entry(const std::string& op, const std::string& shape,
                             const std::vector<std::string>& names) const {
  RouteEntry entry;
  entry.op = op;
  entry.shape = shape;
  for (int c = 0; c < candidates_; ++c) entry.candidates.push_back({names[c], time_ms(c)});
  entry.chosen = choice_;
  entry.how = pinned_ ? "pinned" : times_ms_.empty() ? "only" : "timed";
  return entry;
}

}  // namespace cuda
}  // namespace trainer
