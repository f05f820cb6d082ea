// CudnnAttention: fused (flash) causal attention forward and backward through cuDNN's graph API,
// written with the header-only cuDNN C++ frontend. One graph per (B, NH, NKV, T, HS) and
// direction, built on first use and cached; one workspace, grown only when a graph is built.
// Inputs are strided views into qkv (B,T,NH+2*NKV,HS) = [NH q heads | NKV k heads | NKV v heads]
// (grouped-query attention when NKV < NH: cuDNN maps q head h to kv head h / (NH/NKV)); the
// backward graph writes dq, dk, dv straight into dqkv.
// Data.packing: documents (ForwardDocuments, BackwardDocuments): every document of every sample
// is one sequence of a variable-length batch, cuDNN's ragged ("THD") layout: per-sequence element
// offsets into the same qkv, out, dout and dqkv buffers, the sequence lengths as a padding mask,
// causal inside each sequence. cuDNN (9.6+, Hopper and later) supports ragged offsets only
// together with a padding mask, grouped-query heads with them, and ragged statistics in the
// backward; we chose this over an additive (B,1,T,T) bias, which would cost T^2 memory per sample
// and skip no masked tiles. The batch dimension is fixed per graph, so graphs are built per
// bucket (DocumentBucket: the sequence count and the longest one rounded up to powers of two),
// the spare sequences empty. The sequences and offsets are computed on the device from
// doc_starts (attention_documents.cu); the statistics go through the scratch in cuDNN's ragged
// (B*T,NH) layout and are kept in the ops' (B,NH,T), so either route's backward reads either
// route's forward.
// Builds without the frontend (no TRAINER_WITH_CUDNN) get a class whose Create fails and whose
// ops report "unsupported", so callers take attention_fallback.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "common/status.h"
#include "common/tensor.h"
#include "model/documents.h"
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

  // Data.packing: documents: as Forward and Backward, with doc_starts (B,T) on the device and
  // `documents` their host-measured shape (known). scratch: DocumentScratchBytes of device memory,
  // its contents not needed after the call.
  static size_t DocumentScratchBytes(int B, int T, int NH, int NKV, int HS,
                                     const DocumentShape& documents);
  Status ForwardDocuments(DType dtype, void* out, float* stats, const void* qkv, int B, int T,
                          int NH, int NKV, int HS, const DropoutKey& dropout,
                          const int32_t* doc_starts, const DocumentShape& documents,
                          void* scratch, bool* supported);
  Status BackwardDocuments(DType dtype, void* dqkv, const void* dout, const void* qkv,
                           const void* out, const float* stats, int B, int T, int NH, int NKV,
                           int HS, const DropoutKey& dropout, const int32_t* doc_starts,
                           const DocumentShape& documents, void* scratch, bool* supported);

 private:
  struct Impl;
  CudnnAttention();
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
}  // namespace trainer
