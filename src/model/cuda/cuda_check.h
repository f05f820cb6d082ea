// CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK and NCCL_CHECK: the library check macros of the CUDA
// backend, generated from TRAINER_LIBRARY_CHECK (common/check.h). A failed call returns a Status
// naming the expression, the library's error text, file, line, rank and host.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "common/check.h"

#if TRAINER_WITH_CUDNN
#include <cudnn.h>
#endif

namespace trainer {

inline bool CudaSucceeded(cudaError_t e) {
  return e == cudaSuccess;
}
// What to do about the failures a user can act on, after the library's text.
constexpr const char* kOutOfGpuMemory =
    ". The GPU is out of memory: lower Global.micro_batch_size, set Model.recompute (selective or "
    "block), or spread the model wider (Distributed.*); trainer plan gives a rank's need";
inline std::string CudaErrorText(cudaError_t e) {
  std::string text = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
  switch (e) {
    case cudaErrorMemoryAllocation:
      return text + kOutOfGpuMemory;
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:  // sticky: reported by whichever call comes next
      return text +
             ". A kernel failed before this call, which only reports it: rerun with "
             "CUDA_LAUNCH_BLOCKING=1 to name the kernel, or under Compute Sanitizer "
             "(scripts/compute_sanitizer.sh)";
    case cudaErrorECCUncorrectable:
      return text + ". The GPU reported an uncorrectable memory error: take this node out of "
                    "service (nvidia-smi -q -d ECC) and run elsewhere";
    default:
      return text;
  }
}
inline bool CublasSucceeded(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS;
}
inline std::string CublasErrorText(cublasStatus_t s) {
  const std::string text =
      std::string(cublasLtGetStatusName(s)) + " (" + cublasLtGetStatusString(s) + ")";
  return s == CUBLAS_STATUS_ALLOC_FAILED ? text + kOutOfGpuMemory : text;
}
inline bool NcclSucceeded(ncclResult_t r) {
  return r == ncclSuccess;
}
inline std::string NcclErrorText(ncclResult_t r) {
  const std::string text = ncclGetErrorString(r);
  if (r == ncclSystemError || r == ncclRemoteError)
    return text + ". Another rank or the network failed: its log, and NCCL_DEBUG=INFO here, "
                  "say which";
  return text;
}
#if TRAINER_WITH_CUDNN
inline bool CudnnSucceeded(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS;
}
inline std::string CudnnErrorText(cudnnStatus_t s) {
  return cudnnGetErrorString(s);
}
#endif

}  // namespace trainer

#define CUDA_CHECK(expr) \
  TRAINER_LIBRARY_CHECK("CUDA", expr, #expr, ::trainer::CudaSucceeded, ::trainer::CudaErrorText)
#define CUBLAS_CHECK(expr)                                                   \
  TRAINER_LIBRARY_CHECK("cuBLASLt", expr, #expr, ::trainer::CublasSucceeded, \
                        ::trainer::CublasErrorText)
#define NCCL_CHECK(expr) \
  TRAINER_LIBRARY_CHECK("NCCL", expr, #expr, ::trainer::NcclSucceeded, ::trainer::NcclErrorText)
#if TRAINER_WITH_CUDNN
#define CUDNN_CHECK(expr) \
  TRAINER_LIBRARY_CHECK("cuDNN", expr, #expr, ::trainer::CudnnSucceeded, ::trainer::CudnnErrorText)
#endif
