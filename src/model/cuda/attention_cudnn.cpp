// cuDNN frontend SDPA (see attention_cudnn.h): graphs built on first use per shape and cached,
// including the shapes cuDNN rejects (so a rejected shape costs one attempt and one warning).
#include "model/cuda/attention_cudnn.h"

#if TRAINER_WITH_CUDNN

#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/cuda/cuda_check.h"
#include "model/cuda/cudnn_graph.h"
#include "model/cuda/kernels.h"
#include "model/cuda/op_checks.h"

namespace trainer {
namespace cuda {

namespace fe = cudnn_frontend;

namespace {

enum TensorUid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeed, kOffset };

struct Shape {
  int64_t B, T, NH, NKV, HS;
  float dropout;  // attention dropout probability; 0: none
  // q, out and their gradients are seen as (B, NH, T, HS); k, v and theirs as (B, NKV, T, HS).
  std::vector<int64_t> dims() const { return {B, NH, T, HS}; }
  std::vector<int64_t> kv_dims() const { return {B, NKV, T, HS}; }
  // Views of q, k or v inside qkv (B,T,NH+2*NKV,HS) (the k and v pointers are offset by NH*HS,
  // (NH+NKV)*HS).
  int64_t row() const { return (NH + 2 * NKV) * HS; }
  std::vector<int64_t> qkv_strides() const { return {T * row(), HS, row(), 1}; }
  // out and dout (B,T,NH,HS).
  std::vector<int64_t> out_strides() const { return {T * NH * HS, HS, NH * HS, 1}; }
  std::vector<int64_t> stats_dims() const { return {B, NH, T, 1}; }
  std::vector<int64_t> stats_strides() const { return {NH * T, T, 1, 1}; }
  float scale() const { return 1.f / std::sqrt(static_cast<float>(HS)); }
};

using GraphPtr = CudnnGraphPtr;

// The dropout's Philox seed and offset: (1,1,1,1) int64 tensors in device memory.
std::pair<std::shared_ptr<fe::graph::Tensor_attributes>, std::shared_ptr<fe::graph::Tensor_attributes>>
DropoutInputs(const GraphPtr& graph) {
  auto scalar = [&](const char* name, int64_t uid) {
    return graph->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({1, 1, 1, 1})
                             .set_stride({1, 1, 1, 1})
                             .set_data_type(fe::DataType_t::INT64));
  };
  return {scalar("seed", kSeed), scalar("offset", kOffset)};
}

GraphPtr ForwardGraph(const Shape& s) {
  GraphPtr graph = NewBf16Graph();
  auto q = GraphInput(graph, "q", kQ, s.dims(), s.qkv_strides());
  auto k = GraphInput(graph, "k", kK, s.kv_dims(), s.qkv_strides());
  auto v = GraphInput(graph, "v", kV, s.kv_dims(), s.qkv_strides());
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(s.scale());
  if (s.dropout > 0.f) {
    auto [seed, offset] = DropoutInputs(graph);
    options.set_dropout(s.dropout, seed, offset);
  }
  auto [o, stats] = graph->sdpa(q, k, v, options);
  o->set_output(true).set_dim(s.dims()).set_stride(s.out_strides()).set_uid(kO);
  stats->set_output(true)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(s.stats_dims())
      .set_stride(s.stats_strides())
      .set_uid(kStats);
  return graph;
}

GraphPtr BackwardGraph(const Shape& s) {
  GraphPtr graph = NewBf16Graph();
  auto q = GraphInput(graph, "q", kQ, s.dims(), s.qkv_strides());
  auto k = GraphInput(graph, "k", kK, s.kv_dims(), s.qkv_strides());
  auto v = GraphInput(graph, "v", kV, s.kv_dims(), s.qkv_strides());
  auto o = GraphInput(graph, "o", kO, s.dims(), s.out_strides());
  auto dout = GraphInput(graph, "dout", kDO, s.dims(), s.out_strides());
  auto stats = GraphInput(graph, "stats", kStats, s.stats_dims(), s.stats_strides());
  stats->set_data_type(fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(s.scale());
  if (s.dropout > 0.f) {
    auto [seed, offset] = DropoutInputs(graph);
    options.set_dropout(s.dropout, seed, offset);
  }
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, dout, stats, options);
  dq->set_output(true).set_dim(s.dims()).set_stride(s.qkv_strides()).set_uid(kDQ);
  dk->set_output(true).set_dim(s.kv_dims()).set_stride(s.qkv_strides()).set_uid(kDK);
  dv->set_output(true).set_dim(s.kv_dims()).set_stride(s.qkv_strides()).set_uid(kDV);
  return graph;
}

// Validates, lowers and plans the graph; false with the frontend's message when unsupported.
bool BuildPlans(const GraphPtr& graph, cudnnHandle_t handle, std::string* why) {
  fe::error_t e = graph->validate();
  if (e.is_good()) e = graph->build_operation_graph(handle);
  if (e.is_good()) e = graph->create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = graph->check_support(handle);
  if (e.is_good()) e = graph->build_plans(handle);
  if (e.is_bad()) *why = e.get_message();
  return e.is_good();
}

}  // namespace

struct CudnnAttention::Impl {
  CudnnContext cudnn;
  // (B, T, NH, NKV, HS, dropout, backward) -> graph; nullptr when cuDNN rejected the shape.
  std::map<std::tuple<int, int, int, int, int, float, bool>, GraphPtr> graphs;
  int64_t* rng = nullptr;  // device: the dropout's seed and offset (2 int64)

  ~Impl() {
    if (rng) cudaFree(rng);
  }

  // The dropout's seed and offset for this call, written on the stream (no host wait): a function
  // of the key's seed, step, layer, micro-batch and this rank's first head, so the same call of a
  // resumed run draws the same mask. cuDNN's mask depends on the local head index, so it differs
  // between TP layouts (docs/gpu.md).
  Status SetDropoutSeed(const DropoutKey& key) {
    if (rng == nullptr) CUDA_CHECK(cudaMalloc(&rng, 2 * sizeof(int64_t)));
    const Philox4 w = DropoutWords(key.seed, key.step, kDropoutAttnProbs, key.layer,
                                   key.first_head, key.first_sample, 0, 0);
    const int64_t seed = static_cast<int64_t>((static_cast<uint64_t>(w.v[0]) << 32) | w.v[1]);
    CUDA_CHECK(LaunchFillInt64Pair(rng, seed, 0, cudnn.stream));
    return Status::Ok();
  }

  // The cached graph for the shape, built (and the workspace grown) on first use.
  Status Graph(const Shape& s, bool backward, GraphPtr* out) {
    const auto key = std::make_tuple((int)s.B, (int)s.T, (int)s.NH, (int)s.NKV, (int)s.HS,
                                     s.dropout, backward);
    auto it = graphs.find(key);
    if (it == graphs.end()) {
      GraphPtr graph = backward ? BackwardGraph(s) : ForwardGraph(s);
      std::string why;
      if (BuildPlans(graph, cudnn.handle, &why)) {
        int64_t bytes = 0;
        fe::error_t e = graph->get_workspace_size(bytes);
        if (e.is_bad())
          return RuntimeError("cuDNN attention workspace query (" + Where() +
                              "): " + e.get_message());
        TRAINER_RETURN_IF_ERROR(cudnn.GrowWorkspace(bytes));
      } else {
        LogWarning(
            StrFormat("cuDNN has no fused attention %s for B=%lld T=%lld NH=%lld NKV=%lld "
                      "HS=%lld (%s); using the slower fallback kernels for this shape",
                      backward ? "backward" : "forward", (long long)s.B, (long long)s.T,
                      (long long)s.NH, (long long)s.NKV, (long long)s.HS, why.c_str()));
        // (with dropout: the fallback draws the CPU's mask instead)
        graph = nullptr;
      }
      it = graphs.emplace(key, graph).first;
    }
    *out = it->second;
    return Status::Ok();
  }
};

CudnnAttention::CudnnAttention() : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::Compiled() {
  return true;
}

Status CudnnAttention::Create(cudaStream_t stream, std::unique_ptr<CudnnAttention>* out) {
  std::unique_ptr<CudnnAttention> attention(new CudnnAttention());
  TRAINER_RETURN_IF_ERROR(attention->impl_->cudnn.Open(stream));
  *out = std::move(attention);
  return Status::Ok();
}

Status CudnnAttention::Forward(DType dtype, void* out, float* stats, const void* qkv, int B, int T,
                               int NH, int NKV, int HS, const DropoutKey& dropout,
                               bool* supported) {
  *supported = false;
  if (dtype != DType::kBF16) return Status::Ok();
  const Shape s{B, T, NH, NKV, HS, dropout.p};
  GraphPtr graph;
  TRAINER_RETURN_IF_ERROR(impl_->Graph(s, /*backward=*/false, &graph));
  if (!graph) return Status::Ok();
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  const size_t head = static_cast<size_t>(HS) * DTypeSize(dtype);  // bytes of one head
  std::unordered_map<int64_t, void*> pack = {{kQ, base},
                                             {kK, base + NH * head},
                                             {kV, base + (NH + NKV) * head},
                                             {kO, out},
                                             {kStats, stats}};
  if (dropout.p > 0.f) {
    TRAINER_RETURN_IF_ERROR(impl_->SetDropoutSeed(dropout));
    pack[kSeed] = impl_->rng;
    pack[kOffset] = impl_->rng + 1;
  }
  *supported = true;
  return impl_->cudnn.Execute("attention", graph, pack);
}

Status CudnnAttention::Backward(DType dtype, void* dqkv, const void* dout, const void* qkv,
                                const void* out, const float* stats, int B, int T, int NH, int NKV,
                                int HS, const DropoutKey& dropout, bool* supported) {
  *supported = false;
  if (dtype != DType::kBF16) return Status::Ok();
  const Shape s{B, T, NH, NKV, HS, dropout.p};
  GraphPtr graph;
  TRAINER_RETURN_IF_ERROR(impl_->Graph(s, /*backward=*/true, &graph));
  if (!graph) return Status::Ok();
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  char* dbase = static_cast<char*>(dqkv);
  const size_t head = static_cast<size_t>(HS) * DTypeSize(dtype);  // bytes of one head
  std::unordered_map<int64_t, void*> pack = {{kQ, base},
                                             {kK, base + NH * head},
                                             {kV, base + (NH + NKV) * head},
                                             {kO, const_cast<void*>(out)},
                                             {kDO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(stats)},
                                             {kDQ, dbase},
                                             {kDK, dbase + NH * head},
                                             {kDV, dbase + (NH + NKV) * head}};
  if (dropout.p > 0.f) {
    TRAINER_RETURN_IF_ERROR(impl_->SetDropoutSeed(dropout));
    pack[kSeed] = impl_->rng;
    pack[kOffset] = impl_->rng + 1;
  }
  *supported = true;
  return impl_->cudnn.Execute("attention", graph, pack);
}

}  // namespace cuda
}  // namespace trainer

#else  // !TRAINER_WITH_CUDNN: no fused attention; every call reports "unsupported".

#include "model/cuda/op_checks.h"

namespace trainer {
namespace cuda {

struct CudnnAttention::Impl {};
CudnnAttention::CudnnAttention() = default;
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::Compiled() {
  return false;
}

Status CudnnAttention::Create(cudaStream_t, std::unique_ptr<CudnnAttention>*) {
  return EnvironmentError("cuDNN fused attention (" + Where() +
                          "): this binary was built without the cuDNN frontend. Run "
                          "scripts/fetch_cudnn_frontend.sh and rebuild");
}
Status CudnnAttention::Forward(DType, void*, float*, const void*, int, int, int, int, int,
                               const DropoutKey&, bool* supported) {
  *supported = false;
  return Status::Ok();
}
Status CudnnAttention::Backward(DType, void*, const void*, const void*, const void*, const float*,
                                int, int, int, int, int, const DropoutKey&, bool* supported) {
  *supported = false;
  return Status::Ok();
}

}  // namespace cuda
}  // namespace trainer

#endif  // TRAINER_WITH_CUDNN
