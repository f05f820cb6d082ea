// MakeCudaBackend and CudaBackendCompiled for builds without CUDA (TRAINER_WITH_CUDA unset), so
// that the CPU-only build links and says clearly why no GPU backend exists. Empty otherwise: the
// real ones are in src/model/cuda/cuda_backend.cpp.
#if !TRAINER_WITH_CUDA

#include "common/log.h"
#include "model/backend.h"

namespace trainer {

Status MakeCudaBackend(int device, std::unique_ptr<Backend>* out, DType) {
  out->reset();
  const ProcessIdentity& id = GetProcessIdentity();
  return EnvironmentError(StrFormat(
      "CUDA backend for device %d (rank %d on %s): this binary was built without CUDA. Set "
      "Global.device=cpu, or rebuild with -DTRAINER_CUDA=ON on a machine with nvcc",
      device, id.rank, id.host.c_str()));
}

bool CudaBackendCompiled() {
  return false;
}

}  // namespace trainer

#endif  // !TRAINER_WITH_CUDA
