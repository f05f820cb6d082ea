// CudaBackend's attention (Backend::AttentionForward/Backward): cuDNN's fused SDPA
// (attention_cudnn.h) or our kernels (attention_fallback.cu), by route. Two ops in the route
// table, each with the candidates `cudnn` and `ours`: `attention` (plain causal) and
// `attention_documents` (Data.packing: documents, cuDNN's variable-length batch over the packed
// documents). Both are chosen by rule rather than by time: cuDNN wherever it runs the shape
// (several times faster on Hopper), unless pinned (Engine.gpu_routes) or forced
// (set_force_attention_fallback). A shape cuDNN refuses takes our kernels from then on, with
// one warning. Documents without the host's measure of them (DocumentShape unknown) take our
// kernels. Without attention dropout either route's forward feeds either route's backward (the
// statistics keep the ops' layout); with it, cuDNN draws its own mask, so a shape whose forward
// ran on cuDNN must run its backward there too (a refusal then stops the run with one line).
#include "common/log.h"
#include "model/cuda/attention_cudnn.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/kernels.h"
#include "model/cuda/op_checks.h"

namespace trainer {

namespace {

const char* AttentionOp(bool documents) {
  return documents ? "attention_documents" : "attention";
}
const std::vector<std::string>& AttentionNames() {
  static const std::vector<std::string> names = {"cudnn", "ours"};
  return names;
}
std::string AttentionShapeName(int B, int T, int NH, int NKV, int HS, DType compute) {
  return StrFormat("B=%d T=%d NH=%d NKV=%d HS=%d %s", B, T, NH, NKV, HS, DTypeName(compute));
}

}  // namespace

Status CudaBackend::AttentionRoute(bool documents, int B, int T, int NH, int NKV, int HS,
                                   int** route) {
  const auto key = std::make_tuple(documents, B, T, NH, NKV, HS);
  auto it = attention_routes_.find(key);
  if (it == attention_routes_.end()) {
    const char* op = AttentionOp(documents);
    const std::string shape = AttentionShapeName(B, T, NH, NKV, HS, compute_);
    const bool cudnn = cudnn_attention_ != nullptr && !force_attention_fallback_;
    int pinned = -1;
    TRAINER_RETURN_IF_ERROR(
        pins_.PinnedChoice(op, shape, AttentionNames(), {cudnn, true}, &pinned));
    const int choice = pinned >= 0 ? pinned : cudnn ? kAttentionCudnn : kAttentionOurs;
    routes_.Record({op,
                    shape,
                    {{"cudnn", -1.f}, {"ours", -1.f}},
                    choice,
                    pinned >= 0 ? "pinned" : "rule"});
    it = attention_routes_.emplace(key, choice).first;
  }
  *route = &it->second;
  return Status::Ok();
}

void CudaBackend::ForgetAttentionRoute(const std::string& op, const std::string& shape) {
  for (auto it = attention_routes_.begin(); it != attention_routes_.end(); ++it) {
    const auto& [documents, B, T, NH, NKV, HS] = it->first;
    if (op == AttentionOp(documents) &&
        AttentionShapeName(B, T, NH, NKV, HS, compute_) == shape) {
      attention_routes_.erase(it);
      return;
    }
  }
}

Status CudaBackend::AttentionCudnnRefused(bool documents, int B, int T, int NH, int NKV, int HS,
                                          bool dropout, int* route) {
  const char* op = AttentionOp(documents);
  const std::string shape = AttentionShapeName(B, T, NH, NKV, HS, compute_);
  if (dropout && attention_cudnn_dropout_.count(std::make_tuple(documents, B, T, NH, NKV, HS)))
    return RuntimeError(StrFormat(
        "%s (%s): cuDNN refused a call of a shape whose forward it ran with attention dropout "
        "(%s), and our kernels cannot continue its mask. Set Model.attention_dropout=0, or pin "
        "%s to ours in Engine.gpu_routes",
        op, shape.c_str(),
        documents ? "a bucket of the packed documents it has no graph for" : "its backward",
        op));
  const RouteEntry* entry = routes_.Find(op, shape);
  if (entry != nullptr && entry->how == "pinned")  // the pin's one-line refusal
    return pins_.PinnedChoice(op, shape, AttentionNames(), {false, true}, route);
  *route = kAttentionOurs;
  routes_.Record({op, shape, {{"cudnn", -1.f}, {"ours", -1.f}}, kAttentionOurs, "rule"});
  return Status::Ok();
}

Status CudaBackend::PrepareAttention(Tensor qkv, int num_heads, int num_kv_heads,
                                     Tensor doc_starts, const DocumentShape& documents,
                                     AttentionCall* a) {
  // qkv (B, T, (NH+2*NKV)*HS), as the op's contract checked (num_kv_heads resolved there).
  const int64_t slots = static_cast<int64_t>(num_heads) + 2 * num_kv_heads;
  a->B = static_cast<int>(qkv.dim(0));
  a->T = static_cast<int>(qkv.dim(1));
  a->NH = num_heads;
  a->NKV = num_kv_heads;
  a->HS = static_cast<int>(qkv.dim(2) / slots);
  a->starts = doc_starts.empty() ? nullptr : doc_starts.as<int32_t>();
  const bool docs = a->starts != nullptr;
  if (docs && !documents.known()) return Status::Ok();
  int* route = nullptr;
  TRAINER_RETURN_IF_ERROR(AttentionRoute(docs, a->B, a->T, a->NH, a->NKV, a->HS, &route));
  if (*route != kAttentionCudnn) return Status::Ok();
  a->route = route;
  if (docs)
    TRAINER_RETURN_IF_ERROR(Scratch(cuda::CudnnAttention::DocumentScratchBytes(
                                        a->B, a->T, a->NH, a->NKV, a->HS, documents),
                                    &a->scratch));
  return Status::Ok();
}

Status CudaBackend::RunAttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                                        int num_kv_heads, const DropoutKey& dropout,
                                        Tensor doc_starts, const DocumentShape& documents) {
  AttentionCall a;
  TRAINER_RETURN_IF_ERROR(
      PrepareAttention(qkv, num_heads, num_kv_heads, doc_starts, documents, &a));
  const bool docs = a.starts != nullptr;
  if (a.route != nullptr) {
    bool supported = false;
    if (docs)
      TRAINER_RETURN_IF_ERROR(cudnn_attention_->ForwardDocuments(
          compute_, out.data, stats.as<float>(), qkv.data, a.B, a.T, a.NH, a.NKV, a.HS, dropout,
          a.starts, documents, a.scratch, &supported));
    else
      TRAINER_RETURN_IF_ERROR(cudnn_attention_->Forward(compute_, out.data, stats.as<float>(),
                                                        qkv.data, a.B, a.T, a.NH, a.NKV, a.HS,
                                                        dropout, &supported));
    if (supported) {
      ++counts_.attention_cudnn;
      counts_.attention_cudnn_documents += docs;
      if (dropout.on())
        attention_cudnn_dropout_.insert(std::make_tuple(docs, a.B, a.T, a.NH, a.NKV, a.HS));
      return Status::Ok();
    }
    TRAINER_RETURN_IF_ERROR(
        AttentionCudnnRefused(docs, a.B, a.T, a.NH, a.NKV, a.HS, dropout.on(), a.route));
  }
  ++counts_.attention_fallback;
  CUDA_CHECK(cuda::LaunchAttentionForwardFallback(compute_, out.data, stats.as<float>(), qkv.data,
                                                  a.B, a.T, a.NH, a.NKV, a.HS, dropout, stream_,
                                                  a.starts));
  return Status::Ok();
}

Status CudaBackend::RunAttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                         Tensor stats, int num_heads, int num_kv_heads,
                                         const DropoutKey& dropout, Tensor doc_starts,
                                         const DocumentShape& documents) {
  AttentionCall a;
  TRAINER_RETURN_IF_ERROR(
      PrepareAttention(qkv, num_heads, num_kv_heads, doc_starts, documents, &a));
  const bool docs = a.starts != nullptr;
  bool supported = false;
  if (a.route != nullptr && docs)
    TRAINER_RETURN_IF_ERROR(cudnn_attention_->BackwardDocuments(
        compute_, dqkv.data, dout.data, qkv.data, out.data, stats.as<float>(), a.B, a.T, a.NH,
        a.NKV, a.HS, dropout, a.starts, documents, a.scratch, &supported));
  else if (a.route != nullptr)
    TRAINER_RETURN_IF_ERROR(cudnn_attention_->Backward(compute_, dqkv.data, dout.data, qkv.data,
                                                       out.data, stats.as<float>(), a.B, a.T,
                                                       a.NH, a.NKV, a.HS, dropout, &supported));
  if (supported) {
    ++counts_.attention_cudnn;
    counts_.attention_cudnn_documents += docs;
    return Status::Ok();
  }
  if (a.route != nullptr)  // the forward ran on cuDNN: our backward matches it without dropout
    TRAINER_RETURN_IF_ERROR(
        AttentionCudnnRefused(docs, a.B, a.T, a.NH, a.NKV, a.HS, dropout.on(), a.route));
  ++counts_.attention_fallback;
  void* scratch = nullptr;
  TRAINER_RETURN_IF_ERROR(Scratch(
      cuda::AttentionBackwardFallbackScratchFloats(a.B, a.T, a.NH) * sizeof(float), &scratch));
  CUDA_CHECK(cuda::LaunchAttentionBackwardFallback(
      compute_, dqkv.data, dout.data, qkv.data, out.data, stats.as<float>(),
      static_cast<float*>(scratch), a.B, a.T, a.NH, a.NKV, a.HS, dropout, stream_, a.starts));
  return Status::Ok();
}

}  // namespace trainer
