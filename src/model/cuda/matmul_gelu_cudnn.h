// CudnnGeluMatmul: the MLP's first forward GEMM with its bias and tanh-GELU as one cuDNN graph
// (a runtime-fused matmul + bias + GELU kernel that writes both the pre-activation and the
// output), written with the cuDNN C++ frontend: the other route beside cuBLASLt's GELU_AUX_BIAS
// epilogue, which the backend times against it per shape (cuda_backend_layers.cpp). One graph per
// shape, built on first use; the heuristic's first few plans are built and timed on the call's
// own operands by the route policy (model/route_policy.h), or one is pinned (Engine.gpu_routes).
// Builds without the frontend (no TRAINER_WITH_CUDNN) get a class whose Create fails.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "model/route_table.h"

namespace trainer {
namespace cuda {

// out (N,F) = GELU(pre), pre (N,F) = in (N,C) weight (F,C)^T [+ bias (F)]; bf16, row-major.
struct GeluMatmulArgs {
  void* out = nullptr;
  void* pre = nullptr;
  const void* in = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;  // may be null
  int64_t N = 0, C = 0, F = 0;
};

class CudnnGeluMatmul {
 public:
  static bool Compiled();
  static Status Create(cudaStream_t stream, std::unique_ptr<CudnnGeluMatmul>* out);
  ~CudnnGeluMatmul();
  CudnnGeluMatmul(const CudnnGeluMatmul&) = delete;
  CudnnGeluMatmul& operator=(const CudnnGeluMatmul&) = delete;

  // Enqueues the fused GEMM. *supported = false (nothing runs) when cuDNN has no plan for the
  // shape. When the shape is new, its plans are built and timed first (the outputs are written
  // by those runs too).
  Status Run(const GeluMatmulArgs& args, bool* supported);
  // Routes (model/route_table.h): each shape's plan is op kRouteOp, candidates "plan0", "plan1",
  // ... (the heuristic's order); `pins` (may be null) pins it, `chosen` records it. Both outlive
  // this object.
  static constexpr const char* kRouteOp = "cudnn_gelu_plan";
  void set_routes(const RouteTable* pins, RouteTable* chosen);
  // Drops the graph of the shape the route table names `shape` (its next call builds it again,
  // taking the pins).
  void Forget(const std::string& shape);

 private:
  struct Impl;
  CudnnGeluMatmul();
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
}  // namespace trainer
