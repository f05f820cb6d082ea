// PhaseTimer (phase_timer.h).
#include "engine/phase_timer.h"

#include "common/log.h"

namespace trainer {
namespace {
const char* kPhaseNames[] = {"data",        "forward",  "backward", "pipeline_transfer",
                             "grad_reduce", "optimizer"};
}  // namespace

Status PhaseTimer::BeginStep() {
  if (!enabled_) return Status::Ok();
  next_mark_ = 1;
  pending_.clear();
  return backend_->Mark(0);
}

Status PhaseTimer::Charge(Phase phase) {
  if (!enabled_) return Status::Ok();
  if (next_mark_ == Backend::kMaxMarks) {
    // Out of marks: book what we have, then this interval (from the last mark to a new mark 0)
    // at once, and continue from mark 0.
    TRAINER_RETURN_IF_ERROR(Flush());
    TRAINER_RETURN_IF_ERROR(backend_->Mark(0));
    double s = 0;
    TRAINER_RETURN_IF_ERROR(backend_->SecondsBetween(Backend::kMaxMarks - 1, 0, &s));
    seconds_[static_cast<int>(phase)] += s;
    next_mark_ = 1;
    return Status::Ok();
  }
  pending_.push_back(phase);
  return backend_->Mark(next_mark_++);
}

Status PhaseTimer::Flush() {
  for (size_t i = 0; i < pending_.size(); ++i) {
    double s = 0;
    TRAINER_RETURN_IF_ERROR(
        backend_->SecondsBetween(static_cast<int>(i), static_cast<int>(i + 1), &s));
    seconds_[static_cast<int>(pending_[i])] += s;
  }
  pending_.clear();
  return Status::Ok();
}

Status PhaseTimer::EndStep() {
  if (!enabled_) return Status::Ok();
  ++steps_;
  return Flush();
}

std::string PhaseTimer::Report() const {
  double total = 0;
  for (double s : seconds_) total += s;
  if (steps_ == 0 || total == 0) return "no profiled steps";
  std::string out =
      StrFormat("step time by phase over %d steps (%.1f ms/step):", steps_, 1e3 * total / steps_);
  for (int p = 0; p < static_cast<int>(Phase::kCount); ++p)
    if (seconds_[p] > 0)
      out += StrFormat(" %s %.2f ms (%.0f%%)", kPhaseNames[p], 1e3 * seconds_[p] / steps_,
                       100 * seconds_[p] / total);
  return out;
}

std::vector<std::pair<std::string, double>> PhaseTimer::Record() const {
  std::vector<std::pair<std::string, double>> record;
  for (int p = 0; p < static_cast<int>(Phase::kCount); ++p)
    record.emplace_back(std::string("profile_") + kPhaseNames[p] + "_ms",
                        steps_ ? 1e3 * seconds_[p] / steps_ : 0.0);
  return record;
}

}  // namespace trainer
