// GptModel's sharded storage (Distributed.sharding, gpt.h): from ZeRO stage 2 the gradients of a
// block live in one of two buckets, reduce-scattered over the sharding group into this rank's
// gradient shard after every backward through the block; from stage 3 the parameters of a block
// live only as this rank's shard, gathered into one of two buffers before each forward and
// backward through it. Block i uses bucket and buffer i % 2, so that the next block's gather and
// the last block's reduce-scatter run (on the group's stream, on a GPU) while block i computes.
//
// Gradient accumulation over micro-batches: the bucket starts each backward at zero with this
// rank's piece holding the shard's sum so far, so the reduce-scatter leaves that sum plus every
// rank's new gradients: the shard accumulates without keeping whole gradients.
#include <algorithm>

#include "common/check.h"
#include "model/gpt.h"

namespace trainer {
namespace {
Tensor Rows(const Tensor& flat, size_t begin, size_t count) {
  return flat.rows(static_cast<int64_t>(begin), static_cast<int64_t>(count));
}
}  // namespace

Status GptModel::AllocateShardedBuffers(int64_t flat) {
  // A middle pipeline stage has no tensors outside the blocks: its buffers keep one row.
  const int64_t tail = static_cast<int64_t>(std::max<size_t>(64, layout_.units()[0].size));
  const int64_t block = static_cast<int64_t>(std::max<size_t>(64, layout_.largest_block()));
  const int64_t shard = static_cast<int64_t>(layout_.shard_elements());
  const bool stage3 = layout_.stage() >= 3;
  sizing_kind_ = &ModelBufferBytes::parameters;
  param_buffer_ = Alloc({stage3 ? tail : flat}, compute_);
  if (stage3) {
    param_shard_ = Alloc({shard}, compute_);
    for (Tensor& t : gathered_) t = Alloc({block}, compute_);
  }
  sizing_kind_ = &ModelBufferBytes::gradients;
  grad_buffer_ = Alloc({tail}, DType::kF32);
  grad_shard_ = Alloc({shard}, DType::kF32);
  for (Tensor& t : grad_bucket_) t = Alloc({block}, DType::kF32);
  return Status::Ok();
}

Tensor GptModel::ParamPiece(int u) const {
  if (layout_.stage() >= 3)
    return Rows(param_shard_, layout_.units()[u].shard_offset, layout_.piece(u));
  return Rows(param_buffer_, layout_.piece_begin(u), layout_.piece(u));
}

Tensor GptModel::GradPiece(int u) const {
  if (layout_.stage() >= 2)
    return Rows(grad_shard_, layout_.units()[u].shard_offset, layout_.piece(u));
  return Rows(grad_buffer_, layout_.piece_begin(u), layout_.piece(u));
}

Tensor GptModel::ParamWhole(int u) const {
  if (layout_.stage() >= 3 && u > 0) return Tensor();
  return Rows(param_buffer_, layout_.units()[u].begin, layout_.units()[u].size);
}

Tensor GptModel::GradScratch(int u) const {
  const size_t size = layout_.units()[u].size;
  if (layout_.stage() >= 2) return Rows(u == 0 ? grad_buffer_ : grad_bucket_[0], 0, size);
  return Rows(grad_buffer_, layout_.units()[u].begin, size);
}

Status GptModel::GatherBlock(int i) {
  const int u = layout_.BlockUnit(i);
  TRAINER_RETURN_IF_ERROR(shard_->StartAfter(BackendStream(backend_)));
  return shard_->AllGather(ParamPiece(u).data, gathered_[i % 2].data, layout_.piece(u), compute_);
}

Status GptModel::BeforeBlock(int i, bool backward) {
  if (layout_.stage() < 2) return Status::Ok();
  TRAINER_ASSERT(shard_ != nullptr, "sharded model without its sharding group");
  void* stream = BackendStream(backend_);
  const int last = partition_.num_layers - 1;
  // The first block of a backward pass: the last pass's reduce-scatters end before the buckets
  // and the shard are touched again.
  if (backward && i == last) TRAINER_RETURN_IF_ERROR(shard_->FinishBefore(stream));
  if (layout_.stage() >= 3) {
    if (gathered_ahead_ != i) {
      TRAINER_RETURN_IF_ERROR(GatherBlock(i));
      TRAINER_RETURN_IF_ERROR(shard_->FinishBefore(stream));
    } else if (!backward) {
      TRAINER_RETURN_IF_ERROR(shard_->FinishBefore(stream));  // (backward: AfterBlockBackward)
    }
    const int next = backward ? i - 1 : i + 1;
    gathered_ahead_ = -1;
    if (prefetch_ && next >= 0 && next <= last) {
      TRAINER_RETURN_IF_ERROR(GatherBlock(next));
      gathered_ahead_ = next;
    }
  }
  if (!backward) return Status::Ok();
  const int u = layout_.BlockUnit(i);
  const Tensor bucket = grad_bucket_[i % 2];
  TRAINER_RETURN_IF_ERROR(backend_->Zero(Rows(bucket, 0, layout_.units()[u].size)));
  if (block_backwards_[i] == 0) return Status::Ok();
  const size_t mine = layout_.piece_begin(u) - layout_.units()[u].begin;
  return backend_->CopyDeviceToDevice(Rows(bucket, mine, layout_.piece(u)).data, GradPiece(u).data,
                                      layout_.piece(u) * sizeof(float));
}

Status GptModel::AfterBlockBackward(int i) {
  if (layout_.stage() < 2) return Status::Ok();
  void* stream = BackendStream(backend_);
  const int u = layout_.BlockUnit(i);
  // Block i-1 computes next, in the other bucket (and buffer): what was issued so far (the
  // reduce-scatter of block i+1 that used it, and the gather of block i-1) ends first.
  TRAINER_RETURN_IF_ERROR(shard_->FinishBefore(stream));
  TRAINER_RETURN_IF_ERROR(shard_->StartAfter(stream));
  ++block_backwards_[i];
  return shard_->ReduceScatter(grad_bucket_[i % 2].data, GradPiece(u).data, layout_.piece(u),
                               DType::kF32);
}

Status GptModel::SetShardedParameters(const std::vector<float>& flat) {
  const size_t tail = std::min(flat.size(), layout_.units()[0].size);
  TRAINER_RETURN_IF_ERROR(UploadCompute(backend_, Rows(param_buffer_, 0, tail), flat.data()));
  std::vector<float> shard(layout_.shard_elements(), 0.f);
  layout_.ForEachOwned(0, flat.size(), [&](int, size_t at, size_t to, size_t n) {
    std::copy(flat.begin() + static_cast<std::ptrdiff_t>(at),
              flat.begin() + static_cast<std::ptrdiff_t>(at + n), shard.begin() + to);
  });
  return UploadCompute(backend_, param_shard_, shard.data());
}

}  // namespace trainer
