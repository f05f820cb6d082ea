// AdamW with fp32 master weights and moments (decoupled weight decay; no decay on biases and
// LayerNorm parameters, which sit after the decayed ones in the flat buffer), and the global
// gradient norm that counts each replicated parameter once.
//
// ZeRO-1 (Distributed.zero_stage1): given the DP group, the flat buffers split into one equal
// piece per DP rank (ModelPartition::flat_shards). The gradients are reduce-scattered instead of
// all-reduced, each rank keeps master weights and moments for its piece only and updates it, and
// an all-gather of the compute-dtype parameters gives every rank the whole model again.
#pragma once

#include <vector>

#include "common/communicator.h"
#include "model/gpt.h"

namespace trainer {

class AdamW {
 public:
  // `shard_group`: the DP group when the model's flat buffers are split over it
  // (partition().flat_shards == its size > 1), else nullptr.
  static Status Create(GptModel* model, const OptimizerConfig& config, Communicator* shard_group,
                       std::unique_ptr<AdamW>* out);
  // Backend bytes that Create allocates for a model with `params` split into `shards` pieces:
  // master weights and moments of one piece, and the device gradient norm (arena sizing).
  static size_t BufferBytes(const std::vector<ParameterInfo>& params, int shards);
  ~AdamW();

  bool sharded() const { return shard_group_ != nullptr; }
  // Set master weights (host f32, buffer order) and the model's compute copy from them.
  Status SetMaster(const std::vector<float>& flat);
  // Host copies of the whole state for checkpoints, in buffer order: which = 0 master, 1 first
  // moment, 2 second moment. When sharded, Download is collective over the DP group and uses the
  // gradient buffer as scratch (call it between steps).
  Status Download(int which, std::vector<float>* flat) const;
  Status Upload(int which, const std::vector<float>& flat);
  // Adds delta to the parameters [offset, offset + delta.size()) of the flat buffers outside the
  // gradient step: to the master weights this rank holds and to the model's compute copy (every
  // rank calls it with the same delta). MoE's expert bias, which no gradient moves (its moments
  // stay zero), is updated this way after each step.
  Status AddToParameters(size_t offset, const std::vector<float>& delta);

  // Sharded only: sum the gradients over the DP group, leaving this rank the sums of its piece.
  Status ReduceScatterGradients();
  // Squared L2 norm of the canonical gradients this rank updates, left in device memory (nothing
  // waits for the GPU). Summed over ranks it is the global one: over one DP replica, or over every
  // DP rank when sharded. Where this rank's sum is already global (no TP, PP or ZeRO-1 split),
  // StepClippedOnDevice clips by it without the host.
  Status QueueLocalGradNormSquared();
  // The sum that QueueLocalGradNormSquared left (waits for the GPU).
  Status QueuedGradNormSquared(double* out) const;
  // One step with learning rate lr; gradients are multiplied by grad_scale first (clipping).
  Status Step(int step, double lr, float grad_scale);
  // One step clipped to max_norm by the queued norm, GradientClipScale(norm, max_norm), which the
  // device works out: the host need not wait for the norm.
  Status StepClippedOnDevice(int step, double lr, double max_norm);

 private:
  AdamW() = default;
  // [begin, end) of the flat buffers that this rank updates.
  size_t shard_begin() const { return shard_begin_; }
  Status StepWith(AdamWParams p);
  size_t shard_end() const { return shard_begin_ + shard_size_; }
  GptModel* model_ = nullptr;
  OptimizerConfig config_;
  Communicator* shard_group_ = nullptr;
  Tensor master_, m_, v_;     // shard_size_ elements each, for [shard_begin_, shard_end())
  Tensor grad_norm_squared_;  // (1) f64, QueueLocalGradNormSquared's result
  size_t total_ = 0, first_no_decay_ = 0, shard_begin_ = 0, shard_size_ = 0;
  // Contiguous [begin, end) element ranges of canonical parameters, for the norm.
  std::vector<std::pair<size_t, size_t>> canonical_spans_;
  std::vector<void*> allocations_;
};

}  // namespace trainer
