// RouteTrial (route_trial.h): the first call's untimed runs, the timed calls in turn, the choice.
#include "model/cuda/route_trial.h"

#include "model/cuda/cuda_check.h"

namespace trainer {
namespace cuda {

RouteTrial::RouteTrial(int candidates, int trials_each)
    : candidates_(candidates), trials_each_(trials_each) {}

RouteTrial::~RouteTrial() {
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
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
    events_.resize(2 * candidates_ * trials_each_);
    for (cudaEvent_t& event : events_) CUDA_CHECK(cudaEventCreate(&event));
    return Status::Ok();
  }
  const int trial = calls_ - 1;
  const int c = trial % candidates_;
  result->output = refused_[c] ? last_accepted_ : c;  // a refused candidate's turn: not timed
  CUDA_CHECK(cudaEventRecord(events_[2 * trial], stream));
  if (!run(result->output)) {
    result->refused = true;
    return Status::Ok();
  }
  CUDA_CHECK(cudaEventRecord(events_[2 * trial + 1], stream));
  if (++calls_ == 1 + candidates_ * trials_each_) {
    TRAINER_RETURN_IF_ERROR(Decide());
    result->decided_now = true;
  }
  return Status::Ok();
}

Status RouteTrial::Decide() {
  CUDA_CHECK(cudaEventSynchronize(events_.back()));
  mean_ms_.assign(candidates_, 0.f);
  for (int trial = 0; trial < candidates_ * trials_each_; ++trial) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * trial], events_[2 * trial + 1]));
    mean_ms_[trial % candidates_] += ms / trials_each_;
  }
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
  events_.clear();
  choice_ = last_accepted_;
  for (int c = 0; c < candidates_; ++c) {
    if (refused_[c])
      mean_ms_[c] = -1.f;
    else if (mean_ms_[c] < mean_ms_[choice_])
      choice_ = c;
  }
  decided_ = true;
  return Status::Ok();
}

}  // namespace cuda
}  // namespace trainer
