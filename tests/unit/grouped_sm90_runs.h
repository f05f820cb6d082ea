// Whether our sm90 grouped GEMM kernels (model/cuda/sm90/grouped_gemm_sm90.h) run an (E, OC, C)
// shape on this GPU and build: the CUDA grouped tests' prediction of the route the rule takes.
#pragma once

#include <cstdint>

#include "model/cuda/sm90/grouped_gemm_sm90.h"

namespace trainer {
namespace cuda_testing {

inline bool GroupedSm90KernelRuns(int64_t oc = 256, int64_t c = 256) {
#if defined(TRAINER_WITH_SM90_KERNELS)
  cuda::GroupedSm90Problem p;
  p.m = 1, p.experts = 1, p.oc = oc, p.c = c;
  return cuda::GroupedSm90Supported(p);
#else
  (void)oc, (void)c;  // a build without the kernels
  return false;
#endif
}

}  // namespace cuda_testing
}  // namespace trainer
