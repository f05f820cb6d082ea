// CudnnAttention: fused (flash) causal attention forward and backward through cuDNN's graph API,
// written with the header-only cuDNN C++ frontend. One graph per (B, NH, NKV, T, HS) and
// direction, built on first use and cached; one workspace, grown only when a graph is built.
// Inputs are strided views into qkv (B,T,NH+2*NKV,HS) = [NH q heads | NKV k heads | NKV v heads]
// (grouped-query attention when NKV < NH: cuDNN maps q head h to kv head h / (NH/NKV)); the
// backward graph writes dq, dk, dv straight into dqkv.
// Builds without the frontend (no TRAINER_WITH_CUDNN) get a class whose Create fails and whose
// ops report "unsupported", so callers take attention_fallback.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "common/status.h"
#include "common/tensor.h"
#include "model/philox.h"

namespace trainer {
namespace cuda {

class CudnnAttention {
 public:
  // True when this build has the cuDNN frontend.
  static bool Compiled();
  static Status Create(cudaStream_t stream, std::unique_ptr<CudnnAttention>* out);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // out (B,T,NH,HS) bf16, stats (B,NH,T) f32 logsumexp of the scaled scores. *supported = false
  // (nothing runs) when cuDNN has no engine for this shape or dtype. With dropout.p > 0, cuDNN's
  // own dropout (its Philox, seeded from the key: the same call draws the same mask, but not the
  // CPU's, and the mask depends on the local head index).
  Status Forward(DType dtype, void* out, float* stats, const void* qkv, int B, int T, int NH,
                 int NKV, int HS, const DropoutKey& dropout, bool* supported);
  // dqkv (B,T,NH+2*NKV,HS) overwritten (a kv head's gradient summed over its query heads); the
  // forward's dropout key.
  Status Backward(DType dtype, void* dqkv, const void* dout, const void* qkv, const void* out,
                  const float* stats, int B, int T, int NH, int NKV, int HS,
                  const DropoutKey& dropout, bool* supported);

 private:
  struct Impl;
  CudnnAttention();
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
}  // namespace trainer
