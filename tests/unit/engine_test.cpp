// Engine pieces with closed-form answers: the learning-rate schedule (linear warmup, cosine
// decay, floor), the 1F1B slot count, and the phase timer's bookkeeping on the CPU backend.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "engine/phase_timer.h"
#include "engine/pipeline.h"
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

TEST(PhaseTimer, BooksEachIntervalToItsPhase) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  PhaseTimer timer(cpu.get(), true);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(timer.BeginStep().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ASSERT_TRUE(timer.Charge(Phase::kForward).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(timer.Charge(Phase::kBackward).ok());
    ASSERT_TRUE(timer.EndStep().ok());
  }
  double forward = 0, backward = 0, optimizer = -1;
  for (const auto& [key, ms] : timer.Record()) {
    if (key == "profile_forward_ms") forward = ms;
    if (key == "profile_backward_ms") backward = ms;
    if (key == "profile_optimizer_ms") optimizer = ms;
  }
  EXPECT_GE(forward, 30.0);
  EXPECT_LT(forward, 60.0);
  EXPECT_GE(backward, 10.0);
  EXPECT_LT(backward, 40.0);
  EXPECT_EQ(optimizer, 0.0);
  // A timer that is off books nothing and reports so.
  PhaseTimer off(cpu.get(), false);
  ASSERT_TRUE(off.BeginStep().ok());
  ASSERT_TRUE(off.Charge(Phase::kForward).ok());
  ASSERT_TRUE(off.EndStep().ok());
  EXPECT_EQ(off.Report(), "no profiled steps");
}

}  // namespace
}  // namespace trainer
