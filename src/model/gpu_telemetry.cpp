// GpuTelemetry (gpu_telemetry.h). NVML's C functions are looked up in libnvidia-ml.so.1 with
// dlsym; the few signatures used are declared here, as nvml.h gives them (NVML's ABI is stable,
// and not every CUDA installation ships nvml.h).
#include "model/gpu_telemetry.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <initializer_list>
#include <mutex>
#include <thread>
#include <utility>

namespace trainer {
namespace {

using NvmlReturn = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

struct NvmlApi {
  void* library = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*device_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power_mw)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;

  template <typename F>
  bool Find(F* f, std::initializer_list<const char*> names) {
    for (const char* name : names)
      if ((*f = reinterpret_cast<F>(dlsym(library, name)))) return true;
    return false;
  }
};

}  // namespace

std::string ClockLimitReasonNames(uint64_t reasons) {
  static const std::pair<uint64_t, const char*> kNames[] = {
      {kClockLimitPowerCap, "power cap"},
      {kClockLimitApplicationClocks, "application clocks"},
      {kClockLimitSyncBoost, "sync boost"},
      {kClockLimitSwThermal, "SW thermal slowdown"},
      {kClockLimitHwThermal, "HW thermal slowdown"},
      {kClockLimitHwSlowdown, "HW slowdown"},
      {kClockLimitHwPowerBrake, "HW power brake"},
  };
  std::string text;
  for (const auto& [bit, name] : kNames)
    if (reasons & bit) text += (text.empty() ? "" : ", ") + std::string(name);
  return text.empty() ? "none" : text;
}

bool ClockLimitIsAbnormal(uint64_t reasons) {
  return (reasons & (kClockLimitSwThermal | kClockLimitHwThermal | kClockLimitHwSlowdown |
                     kClockLimitHwPowerBrake)) != 0;
}

void GpuWindowAccumulator::Add(const GpuSample& sample) {
  ++sums_.samples;
  sums_.sm_mhz += sample.sm_mhz;
  sums_.power_w += sample.power_w;
  sums_.max_temperature_c = std::max(sums_.max_temperature_c, sample.temperature_c);
  sums_.reasons |= sample.reasons;
  if (ClockLimitIsAbnormal(sample.reasons)) ++sums_.abnormal_samples;
}

GpuWindow GpuWindowAccumulator::Take() {
  GpuWindow window = sums_;
  if (window.samples > 0) {
    window.sm_mhz /= window.samples;
    window.power_w /= window.samples;
  }
  sums_ = GpuWindow();
  return window;
}

struct GpuTelemetry::Impl {
  NvmlApi nvml;
  bool initialised = false;  // nvmlInit succeeded: the destructor shuts NVML down
  NvmlDevice device = nullptr;
  std::chrono::duration<double> period{0.1};
  std::mutex mutex;
  std::condition_variable stop_signal;
  bool stopping = false;
  GpuWindowAccumulator window;  // guarded by mutex
  std::thread thread;

  bool Read(GpuSample* sample) {
    unsigned mhz = 0, mw = 0, celsius = 0;
    unsigned long long reasons = 0;
    if (nvml.clock(device, kNvmlClockSm, &mhz) != 0 || nvml.power_mw(device, &mw) != 0)
      return false;
    if (nvml.temperature(device, kNvmlTemperatureGpu, &celsius) != 0) celsius = 0;
    if (nvml.reasons(device, &reasons) != 0) reasons = 0;
    *sample = GpuSample{static_cast<double>(mhz), mw / 1000.0, static_cast<double>(celsius),
                        static_cast<uint64_t>(reasons)};
    return true;
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      GpuSample sample;
      const bool ok = Read(&sample);
      lock.lock();
      if (ok) window.Add(sample);
      stop_signal.wait_for(lock, period, [this] { return stopping; });
    }
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    stop_signal.notify_all();
    if (thread.joinable()) thread.join();
    if (initialised) nvml.shutdown();
    if (nvml.library) dlclose(nvml.library);
  }
};

GpuTelemetry::GpuTelemetry(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuTelemetry::~GpuTelemetry() = default;

std::unique_ptr<GpuTelemetry> GpuTelemetry::Start(const std::string& pci_bus_id,
                                                  double period_seconds, std::string* why) {
  auto impl = std::make_unique<Impl>();
  NvmlApi& nvml = impl->nvml;
  nvml.library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml.library) {
    *why = "libnvidia-ml.so.1 (the driver's NVML) cannot be opened";
    return nullptr;
  }
  const bool found = nvml.Find(&nvml.init, {"nvmlInit_v2", "nvmlInit"}) &&
                     nvml.Find(&nvml.shutdown, {"nvmlShutdown"}) &&
                     nvml.Find(&nvml.device_by_pci_bus_id, {"nvmlDeviceGetHandleByPciBusId_v2",
                                                            "nvmlDeviceGetHandleByPciBusId"}) &&
                     nvml.Find(&nvml.clock, {"nvmlDeviceGetClockInfo"}) &&
                     nvml.Find(&nvml.power_mw, {"nvmlDeviceGetPowerUsage"}) &&
                     nvml.Find(&nvml.temperature, {"nvmlDeviceGetTemperature"}) &&
                     nvml.Find(&nvml.reasons, {"nvmlDeviceGetCurrentClocksEventReasons",
                                               "nvmlDeviceGetCurrentClocksThrottleReasons"});
  if (!found) {
    *why = "libnvidia-ml.so.1 lacks a function this trainer reads";
    return nullptr;
  }
  if (nvml.init() != 0) {
    *why = "nvmlInit failed";
    return nullptr;
  }
  impl->initialised = true;
  if (nvml.device_by_pci_bus_id(pci_bus_id.c_str(), &impl->device) != 0) {
    *why = "NVML does not know the GPU at PCI bus id '" + pci_bus_id + "'";
    return nullptr;
  }
  GpuSample first;
  if (!impl->Read(&first)) {
    *why = "NVML cannot read the clock or power of GPU " + pci_bus_id;
    return nullptr;
  }
  impl->period = std::chrono::duration<double>(period_seconds);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<GpuTelemetry>(new GpuTelemetry(std::move(impl)));
}

GpuWindow GpuTelemetry::TakeWindow() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->window.Take();
}

}  // namespace trainer
