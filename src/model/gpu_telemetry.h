// GpuTelemetry: the SM clock, power draw, temperature and clock-limit reasons of this rank's GPU,
// read through NVML (the driver's libnvidia-ml.so.1, opened at run time, so that CPU-only nodes
// need no driver) every `period` on a thread of its own, and averaged over each logging window.
// Under training load an H100/H200 runs at its power limit and its clock falls well below boost;
// a GPU that is hot or slowed by its board runs lower still, and the whole synchronous job runs at
// its pace. The window summary says which of these it is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace trainer {

// NVML's clock event ("throttle") reason bits.
enum ClockLimitReason : uint64_t {
  kClockLimitIdle = 0x1,
  kClockLimitApplicationClocks = 0x2,
  kClockLimitPowerCap = 0x4,
  kClockLimitHwSlowdown = 0x8,
  kClockLimitSyncBoost = 0x10,
  kClockLimitSwThermal = 0x20,
  kClockLimitHwThermal = 0x40,
  kClockLimitHwPowerBrake = 0x80,
};

// "power cap, HW thermal slowdown": the reasons in `reasons` that lower the clock under load
// (idle and display settings left out); "none" when there are none.
std::string ClockLimitReasonNames(uint64_t reasons);
// True for the reasons that mean trouble with the GPU or its board (thermal slowdown, HW slowdown,
// power brake), as opposed to the power cap every GPU under full load meets.
bool ClockLimitIsAbnormal(uint64_t reasons);

struct GpuSample {
  double sm_mhz = 0;
  double power_w = 0;
  double temperature_c = 0;
  uint64_t reasons = 0;
};

// Means of clock and power over a window, the highest temperature, every reason seen, and how
// many samples had an abnormal one (NVML may flag a HW slowdown for a moment at a clock change).
struct GpuWindow {
  int samples = 0;
  int abnormal_samples = 0;
  double sm_mhz = 0;
  double power_w = 0;
  double max_temperature_c = 0;
  uint64_t reasons = 0;
};

class GpuWindowAccumulator {
 public:
  void Add(const GpuSample& sample);
  // The window so far; the next one starts empty.
  GpuWindow Take();

 private:
  GpuWindow sums_;
};

class GpuTelemetry {
 public:
  // Starts sampling the GPU with this PCI bus id ("0000:19:00.0", as cudaDeviceGetPCIBusId
  // gives it). nullptr, with the reason in `why`, when NVML or that GPU cannot be read: telemetry
  // is a report, never a reason to stop.
  static std::unique_ptr<GpuTelemetry> Start(const std::string& pci_bus_id, double period_seconds,
                                             std::string* why);
  ~GpuTelemetry();
  GpuWindow TakeWindow();

 private:
  struct Impl;
  explicit GpuTelemetry(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainer
