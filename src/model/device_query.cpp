// Device queries that do not depend on the build (backend.h): VisibleCudaDevices and
// BackendStream answer in CPU-only builds too.
#include <sys/resource.h>

#include "common/log.h"
#include "model/backend.h"

#if TRAINER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "model/cuda/cuda_backend.h"
#endif

namespace trainer {

int VisibleCudaDevices(std::string* why) {
#if TRAINER_WITH_CUDA
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess) return count;
  if (why != nullptr) *why = StrFormat("%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  return 0;
#else
  (void)why;
  return 0;
#endif
}

std::string CudaDeviceName(int device) {
#if TRAINER_WITH_CUDA
  cudaDeviceProp properties;
  if (cudaGetDeviceProperties(&properties, device) == cudaSuccess) return properties.name;
#endif
  (void)device;
  return "";
}

double DenseBf16PeakTflops(const std::string& device_name) {
  const auto has = [&](const char* part) { return device_name.find(part) != std::string::npos; };
  if (has("H100") || has("H200") || has("H800")) {  // GH200 too
    if (has("PCIe")) return 756;                    // H100 PCIe, H800 PCIe
    if (has("NVL")) return 835;                     // H100 NVL, H200 NVL
    return 989;                                     // SXM
  }
  if (has("A100") || has("A800")) return 312;
  return 0;
}

bool PeakFitsDevice(const std::string& device_name, double peak_tflops) {
  if (peak_tflops != 989.0) return true;  // set for this GPU by the user
  return DenseBf16PeakTflops(device_name) == 989.0;
}

void* BackendStream(Backend* backend) {
#if TRAINER_WITH_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(backend)) return cuda->stream();
#endif
  (void)backend;
  return nullptr;
}

std::string BackendPciBusId(Backend* backend) {
#if TRAINER_WITH_CUDA
  int device = 0;
  char id[32] = {};
  if (dynamic_cast<CudaBackend*>(backend) && cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetPCIBusId(id, sizeof(id), device) == cudaSuccess)
    return id;
#endif
  (void)backend;
  return "";
}

bool DeviceMemoryInfo(Backend* backend, double* free_bytes, double* total_bytes) {
#if TRAINER_WITH_CUDA
  size_t free_now = 0, total = 0;
  if (backend->device_memory() && cudaMemGetInfo(&free_now, &total) == cudaSuccess) {
    *free_bytes = static_cast<double>(free_now);
    *total_bytes = static_cast<double>(total);
    return true;
  }
#endif
  (void)backend, (void)free_bytes, (void)total_bytes;
  return false;
}

double DeviceMemoryUsed(Backend* backend) {
  double free_bytes = 0, total = 0;
  if (DeviceMemoryInfo(backend, &free_bytes, &total)) return total - free_bytes;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // kilobytes on Linux
}

}  // namespace trainer
