// AdamW with its state offloaded (Distributed.sharding.sharding_offload, adamw.h): the master
// weights and moments of this rank's shard live in host memory, owned by a CPU backend; each step
// copies the shard's summed gradients to the host, runs the CPU backend's (vectorised, OpenMP)
// AdamW there, and copies the updated weights, in the model's compute dtype, back into the
// model's pieces before the usual gather of the units kept whole. The clipping scale comes from
// the host (the trainer computes the norm on the host whenever the state is offloaded).
#include "common/check.h"
#include "optimizer/adamw.h"

namespace trainer {
namespace {

char* At(const Tensor& t, size_t index) {
  return static_cast<char*>(t.data) + index * DTypeSize(t.dtype);
}

size_t ShardElements(const std::vector<ParameterInfo>& params, int shards) {
  return FlatBufferElements(params, shards) / static_cast<size_t>(shards);
}

}  // namespace

size_t AdamW::OffloadedBytes(const std::vector<ParameterInfo>& params, int shards,
                             DType compute_dtype) {
  const size_t n = ShardElements(params, shards);
  // Master weights, two moments, the gradients' and the weights' staging (f32), and the
  // weights' compute-dtype copy where that is not f32.
  size_t bytes = 5 * Backend::AllocationSize(n * sizeof(float));
  if (compute_dtype != DType::kF32) bytes += Backend::AllocationSize(n * DTypeSize(compute_dtype));
  return bytes;
}

Status AdamW::SetUpOffload() {
  const DType compute = model_->parameter_buffer().dtype;
  auto allocate = [&](DType dtype, Tensor* t) -> Status {
    void* p = nullptr;
    TRAINER_RETURN_IF_ERROR(host_->Allocate(shard_size_ * DTypeSize(dtype), &p));
    host_allocations_.push_back(p);
    *t = Tensor(p, dtype, {static_cast<int64_t>(shard_size_)});
    return Status::Ok();
  };
  TRAINER_RETURN_IF_ERROR(allocate(DType::kF32, &host_grads_));
  TRAINER_RETURN_IF_ERROR(allocate(DType::kF32, &host_params_));
  if (compute != DType::kF32) TRAINER_RETURN_IF_ERROR(allocate(compute, &host_compute_));
  return Status::Ok();
}

Status AdamW::OffloadedStep(const AdamWParams& params) {
  TRAINER_ASSERT(params.grad_sum_squares == nullptr,
                 "offloaded AdamW takes its clipping scale from the host");
  Backend* be = model_->backend();
  const ShardLayout& layout = model_->shard_layout();
  const int units = static_cast<int>(layout.units().size());
  for (int u = 0; u < units; ++u)  // the shard's gradients to the host
    TRAINER_RETURN_IF_ERROR(be->CopyToHost(At(host_grads_, layout.units()[u].shard_offset),
                                           model_->GradPiece(u).data,
                                           layout.piece(u) * sizeof(float)));
  AdamWParams p = params;
  Status status;
  for (const auto& [span, decayed] : decay_spans_) {
    p.weight_decay = decayed ? static_cast<float>(config_.weight_decay) : 0.f;
    layout.ForEachOwned(span.first, span.second, [&](int, size_t, size_t to, size_t n) {
      if (!status.ok()) return;
      const int64_t at = static_cast<int64_t>(to), count = static_cast<int64_t>(n);
      status = host_->AdamW(host_params_.rows(at, count), master_.rows(at, count),
                            host_grads_.rows(at, count), m_.rows(at, count), v_.rows(at, count), p);
    });
  }
  TRAINER_RETURN_IF_ERROR(status);
  const Tensor compute = host_compute_.empty() ? host_params_ : host_compute_;
  if (!host_compute_.empty()) TRAINER_RETURN_IF_ERROR(host_->Convert(host_compute_, host_params_));
  for (int u = 0; u < units; ++u) {  // the updated weights back into the model's pieces
    const Tensor piece = model_->ParamPiece(u);
    TRAINER_RETURN_IF_ERROR(be->CopyToDevice(piece.data,
                                             At(compute, layout.units()[u].shard_offset),
                                             static_cast<size_t>(piece.bytes())));
  }
  return GatherWholeUnits();
}

}  // namespace trainer
