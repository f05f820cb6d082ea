// Engine pieces with closed-form answers: the learning-rate schedule (linear warmup, cosine
// decay, floor), the 1F1B slot count, and the phase timer's bookkeeping on a CPU backend whose
// clock the test moves (no sleeps).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <string>

#include "engine/phase_timer.h"
#include "engine/pipeline.h"
#include "model/cpu/cpu_backend.h"
#include "optimizer/lr_schedule.h"

namespace trainer {
namespace {

TEST(LearningRate, WarmupThenCosineToTheFloor) {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  const int max_steps = 110;  // 100 decay steps
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 1), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 5), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 10), 1.0);
  EXPECT_NEAR(LearningRate(o, max_steps, 60), 0.55, 1e-12);  // halfway: min + (max-min)/2
  EXPECT_NEAR(LearningRate(o, max_steps, 35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 500), 0.1);
}

TEST(LearningRate, LinearDecayAndConstantAfterTheSameWarmup) {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.decay_style = "linear";
  const int max_steps = 110;  // 100 decay steps
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 5), 0.5);
  EXPECT_NEAR(LearningRate(o, max_steps, 35), 1.0 - 0.9 * 0.25, 1e-12);  // a quarter of the way
  EXPECT_NEAR(LearningRate(o, max_steps, 60), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 110), 0.1);
  o.decay_style = "constant";
  EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, 5), 0.5);  // the warmup stays
  for (int step : {10, 35, 110, 500}) EXPECT_DOUBLE_EQ(LearningRate(o, max_steps, step), 1.0);
}

TEST(PipelineStage, SlotsCoverTheMicroBatchesInFlight) {
  // Stage s of P keeps min(P - s, M) micro-batches in flight under 1F1B.
  EXPECT_EQ(PipelineStage::NumSlots(0, 4, 8), 4);
  EXPECT_EQ(PipelineStage::NumSlots(3, 4, 8), 1);
  EXPECT_EQ(PipelineStage::NumSlots(0, 4, 2), 2);
  EXPECT_EQ(PipelineStage::NumSlots(0, 1, 5), 1);
}

// A CPU backend whose timing marks read a clock the test moves, so that the timer's bookkeeping
// is checked on exact values rather than on sleeps.
class SteppedClockBackend : public CpuBackend {
 public:
  void Advance(double ms) { now_ms_ += ms; }
  Status Mark(int index) override {
    if (index < 0 || index >= kMaxMarks) return RuntimeError("Mark: index out of range");
    marks_ms_[index] = now_ms_;
    ++marks_made_;
    return Status::Ok();
  }
  Status SecondsBetween(int from, int to, double* seconds) override {
    *seconds = (marks_ms_[to] - marks_ms_[from]) / 1e3;
    return Status::Ok();
  }
  int marks_made() const { return marks_made_; }

 private:
  double now_ms_ = 0;
  std::array<double, kMaxMarks> marks_ms_{};
  int marks_made_ = 0;
};

double RecordValue(const PhaseTimer& timer, const std::string& key) {
  for (const auto& [name, ms] : timer.Record())
    if (name == key) return ms;
  ADD_FAILURE() << "no " << key << " in the record";
  return -1;
}

TEST(PhaseTimer, BooksEachIntervalToItsPhase) {
  SteppedClockBackend clock;
  PhaseTimer timer(&clock, true);
  // Step 1: data 2 ms, forward 30, backward 10; step 2: forward 50, backward 30 (no data).
  const double forward[2] = {30, 50}, backward[2] = {10, 30};
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(timer.BeginStep().ok());
    if (step == 0) {
      clock.Advance(2);
      ASSERT_TRUE(timer.Charge(Phase::kData).ok());
    }
    clock.Advance(forward[step]);
    ASSERT_TRUE(timer.Charge(Phase::kForward).ok());
    clock.Advance(backward[step]);
    ASSERT_TRUE(timer.Charge(Phase::kBackward).ok());
    clock.Advance(1000);  // after the last mark of the step: booked to nothing
    ASSERT_TRUE(timer.EndStep().ok());
  }
  // Averages over the two steps.
  EXPECT_NEAR(RecordValue(timer, "profile_data_ms"), 1.0, 1e-9);
  EXPECT_NEAR(RecordValue(timer, "profile_forward_ms"), 40.0, 1e-9);
  EXPECT_NEAR(RecordValue(timer, "profile_backward_ms"), 20.0, 1e-9);
  EXPECT_EQ(RecordValue(timer, "profile_optimizer_ms"), 0.0);
  EXPECT_EQ(timer.Record().size(), static_cast<size_t>(Phase::kCount));
  EXPECT_EQ(timer.Report(),
            "step time by phase over 2 steps (61.0 ms/step): data 1.00 ms (2%) forward 40.00 ms "
            "(66%) backward 20.00 ms (33%)");
  // A timer that is off books nothing, makes no marks and reports so.
  const int marks = clock.marks_made();
  PhaseTimer off(&clock, false);
  ASSERT_TRUE(off.BeginStep().ok());
  clock.Advance(5);
  ASSERT_TRUE(off.Charge(Phase::kForward).ok());
  ASSERT_TRUE(off.EndStep().ok());
  EXPECT_EQ(clock.marks_made(), marks);
  EXPECT_EQ(off.Report(), "no profiled steps");
  EXPECT_EQ(RecordValue(off, "profile_forward_ms"), 0.0);
}

TEST(PhaseTimer, KeepsEveryIntervalWhenAStepOutrunsTheMarks) {
  // 3 * kMaxMarks intervals in one step (a pipeline stage's many micro-batches): the timer books
  // what it has and starts over from mark 0, losing no time.
  SteppedClockBackend clock;
  PhaseTimer timer(&clock, true);
  ASSERT_TRUE(timer.BeginStep().ok());
  const int intervals = 3 * Backend::kMaxMarks;
  for (int i = 0; i < intervals; ++i) {
    const bool forward = i % 2 == 0;
    clock.Advance(forward ? 1.0 : 2.0);
    ASSERT_TRUE(timer.Charge(forward ? Phase::kForward : Phase::kPipelineTransfer).ok());
  }
  ASSERT_TRUE(timer.EndStep().ok());
  EXPECT_NEAR(RecordValue(timer, "profile_forward_ms"), intervals / 2 * 1.0, 1e-9);
  EXPECT_NEAR(RecordValue(timer, "profile_pipeline_transfer_ms"), intervals / 2 * 2.0, 1e-9);
}

TEST(PhaseTimer, TheCpuBackendsMarksFollowTheHostClock) {
  // The real CPU marks: later marks are later, and indices out of range are refused.
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  ASSERT_TRUE(cpu->Mark(0).ok());
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() == start) {
  }
  ASSERT_TRUE(cpu->Mark(1).ok());
  double forward = 0, backward = 0;
  ASSERT_TRUE(cpu->SecondsBetween(0, 1, &forward).ok());
  ASSERT_TRUE(cpu->SecondsBetween(1, 0, &backward).ok());
  EXPECT_GT(forward, 0.0);
  EXPECT_EQ(backward, -forward);
  EXPECT_FALSE(cpu->Mark(Backend::kMaxMarks).ok());
  EXPECT_FALSE(cpu->SecondsBetween(0, -1, &forward).ok());
}

}  // namespace
}  // namespace trainer
