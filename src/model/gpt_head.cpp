// GptModel's head on the last stage: the final norm, the LM head and the cross-entropy, in chunks
// of Model.loss_chunk_tokens tokens (torchtune's chunked output, Liger's fused linear
// cross-entropy). For each chunk of rows:
//   logits (n, V/tp) = lnf_out[rows] (n, C) @ lm_head^T         (vocabulary-parallel over TP)
//   losses[rows], and with a dloss_scale the logits' gradient in place
//   dln[rows] (n, C) = dlogits @ lm_head,   d(lm_head) (V/tp, C) += dlogits^T @ lnf_out[rows]
// so only one chunk's logits are held, and the head's backward is done when the forward ends:
// Backward starts from dln. The losses are those of one pass; d(lm_head) differs only by the
// order of its sums over the chunks.
#include <algorithm>

#include "common/check.h"
#include "model/gpt.h"

namespace trainer {
namespace {
constexpr int64_t kAutoChunkBytes = int64_t{1} << 30;  // the logits of one chunk, at most
constexpr int64_t kChunkRowMultiple = 128;              // the GEMMs' row tile
}  // namespace

int64_t GptModel::LossChunkRows(const ModelConfig& config, const ModelPartition& partition,
                                DType compute, int64_t rows) {
  if (config.loss_chunk_tokens > 0) return std::min<int64_t>(rows, config.loss_chunk_tokens);
  const int64_t row_bytes =
      static_cast<int64_t>(config.padded_vocab() / partition.tp_size) * DTypeSize(compute);
  const int64_t chunks = std::max<int64_t>(1, (rows * row_bytes + kAutoChunkBytes - 1) /
                                                  kAutoChunkBytes);
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  const int64_t rounded = (per_chunk + kChunkRowMultiple - 1) / kChunkRowMultiple *
                          kChunkRowMultiple;
  return std::min(rows, rounded);
}

Status GptModel::HeadForward(const BlockContext& ctx, int slot, Tensor x, const int32_t* targets,
                             float dloss_scale) {
  Slot& s = slots_[slot];
  last_forward_slot_ = slot;
  const Tensor ln = RowBlockTarget(ctx, s.lnf_out);
  TRAINER_RETURN_IF_ERROR(
      NormForward(ctx, ln, s.lnf_mean, s.lnf_rstd, x, ends_.lnf_w, ends_.lnf_b));
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, ln, s.lnf_out));
  if (targets == nullptr) return Status::Ok();  // sampling: LogitsRow makes the rows it needs
  const int64_t N = static_cast<int64_t>(B_) * T_;
  TRAINER_RETURN_IF_ERROR(backend_->CopyToDevice(s.targets.data, targets, N * sizeof(int32_t)));
  const Tensor flat_targets(s.targets.data, DType::kI32, {N});
  const bool training = dloss_scale != 0.f;
  GradientWrite write =
      overwrite_weight_gradients_ ? GradientWrite::kOverwrite : GradientWrite::kAccumulate;
  const int64_t chunk = scratch_.logits.shape[0];
  for (int64_t r = 0; r < N; r += chunk) {
    const int64_t n = std::min(chunk, N - r);
    const Tensor logits = scratch_.logits.rows(0, n);  // (n, V/tp), then its gradient
    const Tensor in = MatrixRows(s.lnf_out, r, n);     // (n, C)
    TRAINER_RETURN_IF_ERROR(backend_->MatmulForward(logits, Tensor(), in, ends_.lm_head, Tensor(),
                                                    Activation::kNone));
    TRAINER_RETURN_IF_ERROR(
        CrossEntropy(logits, flat_targets.rows(r, n), scratch_.losses.rows(r, n), dloss_scale));
    if (!training) continue;
    TRAINER_RETURN_IF_ERROR(backend_->MatmulBackward(MatrixRows(scratch_.dln, r, n),
                                                     end_grads_.lm_head, Tensor(), logits, in,
                                                     ends_.lm_head, write));
    write = GradientWrite::kAccumulate;
  }
  return Status::Ok();
}

Status GptModel::CrossEntropy(Tensor logits, Tensor targets, Tensor losses, float dloss_scale) {
  const int64_t n = logits.shape[0];
  const int V = config_.vocab_size;
  const Tensor row_max = scratch_.row_max.rows(0, n);
  const Tensor sums(scratch_.sums.data, DType::kF32, {2, n});  // (2, n): the sums, target logits
  const Tensor dlogits = dloss_scale != 0.f ? logits : Tensor();
  if (tp_ == nullptr || tp_->size() == 1)  // the whole vocabulary here: one pass
    return backend_->CrossEntropyFused(losses, dlogits, logits, row_max, sums, targets, V,
                                       dloss_scale);
  TRAINER_RETURN_IF_ERROR(backend_->CrossEntropyRowMax(row_max, logits, VocabStart(), V));
  TRAINER_RETURN_IF_ERROR(
      tp_->AllReduce(row_max.data, static_cast<size_t>(n), DType::kF32, ReduceOp::kMax));
  TRAINER_RETURN_IF_ERROR(
      backend_->CrossEntropySums(sums, logits, row_max, targets, VocabStart(), V));
  TRAINER_RETURN_IF_ERROR(
      tp_->AllReduce(sums.data, 2 * static_cast<size_t>(n), DType::kF32, ReduceOp::kSum));
  return backend_->CrossEntropyBackward(losses, dlogits, logits, row_max, sums, targets,
                                        VocabStart(), V, dloss_scale);
}

Status GptModel::LogitsRow(int64_t row, std::vector<float>* out) {
  TRAINER_ASSERT(partition_.last_stage() && (tp_ == nullptr || tp_->size() == 1),
                 "LogitsRow needs the last stage without TP");
  TRAINER_ASSERT(row >= 0 && row < static_cast<int64_t>(B_) * T_, "LogitsRow: row out of range");
  TRAINER_ASSERT(last_forward_slot_ >= 0, "LogitsRow needs a Forward first");
  const int V = config_.vocab_size;
  const Tensor logits = scratch_.logits.rows(0, 1);
  TRAINER_RETURN_IF_ERROR(backend_->MatmulForward(logits, Tensor(),
                                                  MatrixRows(slots_[last_forward_slot_].lnf_out,
                                                             row, 1),
                                                  ends_.lm_head, Tensor(), Activation::kNone));
  out->resize(V);
  if (logits.dtype == DType::kF32) return backend_->CopyToHost(out->data(), logits.data, V * 4);
  std::vector<uint16_t> bf16(V);
  TRAINER_RETURN_IF_ERROR(backend_->CopyToHost(bf16.data(), logits.data, V * 2));
  for (int i = 0; i < V; ++i) (*out)[i] = BF16ToFloat(bf16[i]);
  return Status::Ok();
}

Status GptModel::AccumulateLoss(bool first) {
  return backend_->SumInto(scratch_.loss_sum, scratch_.losses, SumOf::kValues, !first);
}

Status GptModel::LossSum(double* out) {
  return backend_->CopyToHost(out, scratch_.loss_sum.data, sizeof(double));
}

}  // namespace trainer
