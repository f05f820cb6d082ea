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
inline std::string CudaErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}
inline bool CublasSucceeded(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS;
}
inline std::string CublasErrorText(cublasStatus_t s) {
  return std::string(cublasLtGetStatusName(s)) + " (" + cublasLtGetStatusString(s) + ")";
}
inline bool NcclSucceeded(ncclResult_t r) {
  return r == ncclSuccess;
}
inline std::string NcclErrorText(ncclResult_t r) {
  return ncclGetErrorString(r);
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
  TRAINER_LIBRARY_CHECK("CUDA", expr, ::trainer::CudaSucceeded, ::trainer::CudaErrorText)
#define CUBLAS_CHECK(expr) \
  TRAINER_LIBRARY_CHECK("cuBLASLt", expr, ::trainer::CublasSucceeded, ::trainer::CublasErrorText)
#define NCCL_CHECK(expr) \
  TRAINER_LIBRARY_CHECK("NCCL", expr, ::trainer::NcclSucceeded, ::trainer::NcclErrorText)
#if TRAINER_WITH_CUDNN
#define CUDNN_CHECK(expr) \
  TRAINER_LIBRARY_CHECK("cuDNN", expr, ::trainer::CudnnSucceeded, ::trainer::CudnnErrorText)
#endif
