// The watchdog's asynchronous error sources (watchdog.h), with a fake source in place of NCCL's
// communicators: a reported error ends the process at once (exit 1) with the source's line and
// the phase, while the rank keeps beating, so the timeout could not have ended it; a healthy
// source is asked every period while registered and never after it is unregistered.
#include "mpi_bootstrap/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace trainer {
namespace {

using Clock = std::chrono::steady_clock;

class FakeSource : public AsyncErrorSource {
 public:
  explicit FakeSource(double fails_after_s) : fails_after_s_(fails_after_s) {}
  std::string AsyncError() override {
    ++questions;
    const double age = std::chrono::duration<double>(Clock::now() - born_).count();
    return fails_after_s_ >= 0 && age >= fails_after_s_ ? "fake link to rank 3 broke" : "";
  }
  std::atomic<int> questions{0};

 private:
  const double fails_after_s_;  // < 0: healthy
  const Clock::time_point born_ = Clock::now();
};

// Beats every 20 ms for `seconds`.
void BeatFor(Watchdog* watchdog, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    watchdog->Beat("a fake step");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(WatchdogDeathTest, AnAsyncErrorEndsTheRankAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Clock::time_point start = Clock::now();
  EXPECT_EXIT(
      {
        FakeSource source(0.3);
        RegisterAsyncErrorSource(&source);
        Watchdog watchdog(60);  // asked every 2.5 s; the timeout alone would take 60 s
        BeatFor(&watchdog, 20);
        std::exit(0);  // not ended by the source
      },
      testing::ExitedWithCode(1), "fake link to rank 3 broke \\(found during a fake step\\)");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10);
}

TEST(WatchdogTest, AHealthySourceIsAskedWhileRegistered) {
  FakeSource source(-1);
  RegisterAsyncErrorSource(&source);
  {
    Watchdog watchdog(0.4);  // asked every 0.1 s
    BeatFor(&watchdog, 0.5);
    EXPECT_GE(source.questions.load(), 3);
    UnregisterAsyncErrorSource(&source);
    const int asked = source.questions.load();
    BeatFor(&watchdog, 0.3);
    EXPECT_EQ(source.questions.load(), asked);
  }
}

}  // namespace
}  // namespace trainer
