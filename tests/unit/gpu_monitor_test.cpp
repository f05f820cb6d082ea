// The GPU report: window means and reasons (against sums done here), the reason names, the job's
// lowest clock, its rank and the total power as the all-reduces agree on them (a fake world whose
// other ranks contribute set values), the log text and metrics fields, and that telemetry declines
// cleanly where NVML cannot read the GPU (no driver here; a bus id no GPU has on a GPU machine).
#include "engine/gpu_monitor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "test_communicator.h"

namespace trainer {
namespace {

// This rank's view of a world whose other ranks' contributions to each all-reduce call (already
// folded over those ranks, one value per element) are set by the test.
class FakeWorld final : public TestCommunicator {
 public:
  FakeWorld(int rank, int size, std::vector<std::vector<double>> others)
      : TestCommunicator(rank, size), others_(std::move(others)) {}
  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    if (dtype != DType::kF64 || calls_ >= others_.size() || others_[calls_].size() != count)
      return RuntimeError("unexpected all-reduce");
    double* x = static_cast<double*>(data);
    for (size_t i = 0; i < count; ++i)
      x[i] = op == ReduceOp::kMax ? std::max(x[i], others_[calls_][i]) : x[i] + others_[calls_][i];
    ++calls_;
    return Status::Ok();
  }
  size_t calls() const { return calls_; }

 private:
  std::vector<std::vector<double>> others_;
  size_t calls_ = 0;
};

constexpr double kNothing = -1e300;  // what a rank without a sample contributes

GpuWindow Sampled(double mhz, double watts) {
  GpuWindow w;
  w.samples = 3;
  w.sm_mhz = mhz;
  w.power_w = watts;
  w.max_temperature_c = 61;
  return w;
}

TEST(GpuWindow, MeansMaximaAndReasonsThenAFreshWindow) {
  GpuWindowAccumulator acc;
  acc.Add({1500, 690, 70, kClockLimitPowerCap});
  acc.Add({1400, 700, 75, kClockLimitPowerCap | kClockLimitHwThermal});
  acc.Add({1300, 650, 72, 0});
  const GpuWindow w = acc.Take();
  EXPECT_EQ(w.samples, 3);
  EXPECT_DOUBLE_EQ(w.sm_mhz, (1500.0 + 1400 + 1300) / 3);
  EXPECT_DOUBLE_EQ(w.power_w, (690.0 + 700 + 650) / 3);
  EXPECT_DOUBLE_EQ(w.max_temperature_c, 75);
  EXPECT_EQ(w.reasons, kClockLimitPowerCap | kClockLimitHwThermal);
  EXPECT_EQ(w.abnormal_samples, 1);
  const GpuWindow next = acc.Take();
  EXPECT_EQ(next.samples, 0);
  EXPECT_EQ(next.sm_mhz, 0);
  EXPECT_EQ(next.reasons, 0u);
}

TEST(GpuWindow, ReasonNamesAndWhichAreAbnormal) {
  EXPECT_EQ(ClockLimitReasonNames(0), "none");
  EXPECT_EQ(ClockLimitReasonNames(kClockLimitIdle), "none");
  EXPECT_EQ(ClockLimitReasonNames(kClockLimitPowerCap | kClockLimitHwThermal),
            "power cap, HW thermal slowdown");
  EXPECT_EQ(ClockLimitReasonNames(kClockLimitHwPowerBrake | kClockLimitSwThermal),
            "SW thermal slowdown, HW power brake");
  EXPECT_FALSE(ClockLimitIsAbnormal(kClockLimitPowerCap | kClockLimitIdle));
  EXPECT_FALSE(ClockLimitIsAbnormal(kClockLimitApplicationClocks | kClockLimitSyncBoost));
  for (uint64_t bad :
       {kClockLimitSwThermal, kClockLimitHwThermal, kClockLimitHwSlowdown, kClockLimitHwPowerBrake})
    EXPECT_TRUE(ClockLimitIsAbnormal(kClockLimitPowerCap | bad)) << bad;
}

TEST(GpuReport, ThisRankIsTheSlowest) {
  // Rank 2 at 1400 MHz; the fastest other rank's negated clock is -1450 (so none is below 1400),
  // no other rank claims the lowest, and the three others draw 2010 W together.
  FakeWorld world(2, 4, {{-1450}, {kNothing}, {2010, 3}});
  GpuReport r;
  ASSERT_TRUE(AgreeOnGpuReport(&world, Sampled(1400, 690), &r).ok());
  EXPECT_EQ(world.calls(), 3u);
  EXPECT_DOUBLE_EQ(r.lowest_sm_mhz, 1400);
  EXPECT_EQ(r.lowest_rank, 2);
  EXPECT_DOUBLE_EQ(r.total_power_w, 2700);
  EXPECT_EQ(r.Text(4), " | 1400 MHz 690 W, lowest 1400 MHz on rank 2");
  std::map<std::string, double> fields;
  for (const auto& [key, value] : r.Fields(900000)) fields[key] = value;
  EXPECT_DOUBLE_EQ(fields["gpu_power_w_total"], 2700);
  EXPECT_DOUBLE_EQ(fields["gpu_joules_per_token"], 2700.0 / 900000);
}

TEST(GpuReport, AnotherRankIsSlowerAndTiesGoToTheLowestRank) {
  // Another rank runs at 1300 MHz: this one (rank 0, 1485 MHz) does not claim the lowest, rank 5
  // does.
  FakeWorld world(0, 8, {{-1300}, {-5}, {4800, 7}});
  GpuReport r;
  ASSERT_TRUE(AgreeOnGpuReport(&world, Sampled(1485, 692), &r).ok());
  EXPECT_DOUBLE_EQ(r.lowest_sm_mhz, 1300);
  EXPECT_EQ(r.lowest_rank, 5);
  // Rank 3 and rank 1 both at 1300 MHz: the lower rank is named.
  // One of the eight did not sample its GPU: no job total.
  FakeWorld tie(3, 8, {{-1300}, {-1}, {4200, 6}});
  ASSERT_TRUE(AgreeOnGpuReport(&tie, Sampled(1300, 650), &r).ok());
  EXPECT_EQ(r.lowest_rank, 1);
  EXPECT_EQ(r.total_power_w, 0);
  std::map<std::string, double> fields;
  for (const auto& [key, value] : r.Fields(1e6)) fields[key] = value;
  EXPECT_EQ(fields.size(), 5u);
  EXPECT_DOUBLE_EQ(fields["gpu_sm_mhz"], 1300);
  EXPECT_DOUBLE_EQ(fields["gpu_power_w"], 650);
  EXPECT_DOUBLE_EQ(fields["gpu_temperature_c"], 61);
  EXPECT_DOUBLE_EQ(fields["gpu_sm_mhz_lowest"], 1300);
  EXPECT_DOUBLE_EQ(fields["gpu_sm_mhz_lowest_rank"], 1);
}

TEST(GpuReport, ThisRankUnsampledOthersSampled) {
  FakeWorld world(0, 2, {{-1500}, {-1}, {700, 1}});
  GpuReport r;
  ASSERT_TRUE(AgreeOnGpuReport(&world, GpuWindow(), &r).ok());
  EXPECT_EQ(r.lowest_rank, 1);
  EXPECT_EQ(r.total_power_w, 0);  // this rank's GPU is not in the sum
  EXPECT_EQ(r.Text(2), " | lowest 1500 MHz on rank 1");
  EXPECT_EQ(r.Fields(1e6).size(), 2u);
}

TEST(GpuReport, NothingSampledAnywhere) {
  FakeWorld world(0, 2, {{kNothing}, {kNothing}, {0, 0}});
  GpuReport r;
  ASSERT_TRUE(AgreeOnGpuReport(&world, GpuWindow(), &r).ok());
  EXPECT_EQ(world.calls(), 3u);  // every rank joins every all-reduce, sampled or not
  EXPECT_EQ(r.lowest_rank, -1);
  EXPECT_EQ(r.Text(2), "");
  EXPECT_TRUE(r.Fields(1e6).empty());
  // One rank alone: its own figures, no "lowest"; the job's power is its GPU's.
  SelfCommunicator self;
  ASSERT_TRUE(AgreeOnGpuReport(&self, Sampled(1485, 692), &r).ok());
  EXPECT_EQ(r.Text(1), " | 1485 MHz 692 W");
  EXPECT_DOUBLE_EQ(r.total_power_w, 692);
}

TEST(GpuTelemetry, DeclinesWithAReasonWhereTheGpuCannotBeRead) {
  // No driver here; on a GPU machine NVML is there but no GPU has this bus id.
  std::string why;
  EXPECT_EQ(GpuTelemetry::Start("00000000:FF:1F.7", 0.1, &why), nullptr);
  EXPECT_FALSE(why.empty());
}

TEST(GpuMonitor, TheCpuPathReportsNothing) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  GpuMonitor monitor(cpu.get());
  SelfCommunicator self;
  GpuReport r;
  ASSERT_TRUE(monitor.Report(&self, &r).ok());
  EXPECT_TRUE(r.Fields(1e6).empty());
}

}  // namespace
}  // namespace trainer
