// What the cuDNN frontend users (fused attention, the fused GELU GEMM) share: CudnnContext, a
// handle bound to the backend's stream with the one device workspace it grows only when a newly
// built graph or plan needs more (so never inside the step loop once every shape has been seen),
// which runs graphs and reports their failures in one form; and the graph helpers: a graph with
// bf16 inputs and outputs and f32 intermediates and compute, an input tensor of it, and a
// pointwise node computing in f32. Include only where TRAINER_WITH_CUDNN is set.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/op_checks.h"

namespace trainer {
namespace cuda {

using CudnnGraphPtr = std::shared_ptr<cudnn_frontend::graph::Graph>;

inline CudnnGraphPtr NewBf16Graph() {
  auto graph = std::make_shared<cudnn_frontend::graph::Graph>();
  graph->set_io_data_type(cudnn_frontend::DataType_t::BFLOAT16)
      .set_intermediate_data_type(cudnn_frontend::DataType_t::FLOAT)
      .set_compute_data_type(cudnn_frontend::DataType_t::FLOAT);
  return graph;
}

inline std::shared_ptr<cudnn_frontend::graph::Tensor_attributes> GraphInput(
    const CudnnGraphPtr& graph, const char* name, int64_t uid, std::vector<int64_t> dims,
    std::vector<int64_t> strides) {
  return graph->tensor(cudnn_frontend::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim(std::move(dims))
                           .set_stride(std::move(strides)));
}

// A pointwise node computing in f32.
inline cudnn_frontend::graph::Pointwise_attributes PointwiseF32(
    const char* name, cudnn_frontend::PointwiseMode_t mode) {
  return cudnn_frontend::graph::Pointwise_attributes()
      .set_name(name)
      .set_mode(mode)
      .set_compute_data_type(cudnn_frontend::DataType_t::FLOAT);
}

struct CudnnContext {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  CudnnContext() = default;
  CudnnContext(const CudnnContext&) = delete;
  CudnnContext& operator=(const CudnnContext&) = delete;
  ~CudnnContext() {
    if (workspace) cudaFree(workspace);
    if (handle) cudnnDestroy(handle);
  }

  // Creates the handle and binds it to `on`.
  Status Open(cudaStream_t on) {
    stream = on;
    CUDNN_CHECK(cudnnCreate(&handle));
    CUDNN_CHECK(cudnnSetStream(handle, stream));
    return Status::Ok();
  }

  // Enqueues `graph` with the tensors in `pack` and the workspace: plan `plan`, or with plan < 0
  // the plan build_plans chose. A failure names `what` and how to see cuDNN's reasons.
  Status Execute(const char* what, const CudnnGraphPtr& graph,
                 std::unordered_map<int64_t, void*>& pack, int64_t plan = -1) {
    cudnn_frontend::error_t e =  // not const: get_message() is not a const member
        plan < 0 ? graph->execute(handle, pack, workspace)
                 : graph->execute_plan_at_index(handle, pack, workspace, plan);
    if (e.is_bad())
      return RuntimeError(std::string("cuDNN ") + what + " execution (" + Where() + "): " +
                          e.get_message() + ". Rerun with CUDNN_FRONTEND_LOG_INFO=1 for details");
    return Status::Ok();
  }

  // A workspace of at least `need` bytes; the old one may still be in use by queued work.
  Status GrowWorkspace(int64_t need) {
    if (need <= workspace_bytes) return Status::Ok();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (workspace) CUDA_CHECK(cudaFree(workspace));
    workspace = nullptr;
    workspace_bytes = 0;
    CUDA_CHECK(cudaMalloc(&workspace, need));
    workspace_bytes = need;
    return Status::Ok();
  }
};

}  // namespace cuda
}  // namespace trainer
