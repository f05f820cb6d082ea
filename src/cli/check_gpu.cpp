// GPU facts for `trainer check` (check_gpu.h): cudaGetDeviceProperties for the bound device and
// the library versions, compiled only with TRAINER_WITH_CUDA (and cuDNN's with TRAINER_WITH_CUDNN).
#include "cli/check_gpu.h"

#include "common/log.h"

#if TRAINER_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#if TRAINER_WITH_CUDNN
#include <cudnn.h>
#endif
#endif

namespace trainer {

#if TRAINER_WITH_CUDA
namespace {

// NCCL and cuDNN codes: major*10000 + minor*100 + patch since NCCL 2.9 / cuDNN 9, before that
// major*1000 + minor*100 + patch.
std::string LibraryVersion(long code) {
  if (code >= 10000) return StrFormat("%ld.%ld.%ld", code / 10000, code / 100 % 100, code % 100);
  return StrFormat("%ld.%ld.%ld", code / 1000, code / 100 % 10, code % 100);
}

// CUDA codes: major*1000 + minor*10 (0: no driver).
std::string CudaVersion(int code) {
  if (code <= 0) return "none";
  return StrFormat("%d.%d", code / 1000, code % 1000 / 10);
}

}  // namespace

StatusOr<GpuFacts> QueryGpu(int device) {
  GpuFacts facts;
  if (cudaGetDeviceCount(&facts.visible) != cudaSuccess) facts.visible = 0;
  cudaGetLastError();  // clear the error that a failed count leaves behind
  if (device < 0) return facts;
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return EnvironmentError(
        StrFormat("cannot read the properties of cuda:%d: %s. Check the driver "
                  "with nvidia-smi on this host",
                  device, cudaGetErrorString(e)));
  const unsigned char* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  facts.uuid = "GPU-";
  for (int i = 0; i < 16; ++i) {
    facts.uuid += StrFormat("%02x", u[i]);
    if (i == 3 || i == 5 || i == 7 || i == 9) facts.uuid += "-";
  }
  char bus_id[32] = {0};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device) == cudaSuccess)
    facts.pci_bus_id = bus_id;
  facts.name = prop.name;
  facts.memory_bytes = prop.totalGlobalMem;
  return facts;
}

std::string GpuLibraryVersions() {
  int driver = 0, runtime = 0, nccl = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  ncclGetVersion(&nccl);
  std::string text = "CUDA driver " + CudaVersion(driver) + ", runtime " + CudaVersion(runtime) +
                     ", NCCL " + LibraryVersion(nccl);
#if TRAINER_WITH_CUDNN
  text += ", cuDNN " + LibraryVersion(static_cast<long>(cudnnGetVersion()));
#else
  text += ", cuDNN not built";
#endif
  return text;
}

#else  // !TRAINER_WITH_CUDA

StatusOr<GpuFacts> QueryGpu(int device) {
  if (device >= 0)
    return EnvironmentError(
        StrFormat("cuda:%d is bound but this trainer was built without CUDA. "
                  "Rebuild with -DTRAINER_CUDA=ON",
                  device));
  return GpuFacts{};
}

std::string GpuLibraryVersions() {
  return "CUDA: not built";
}

#endif  // TRAINER_WITH_CUDA

}  // namespace trainer
