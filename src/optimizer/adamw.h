// AdamW with fp32 master weights and moments (decoupled weight decay; no decay on biases and
// LayerNorm parameters, which sit after the decayed ones in the flat buffer), and the global
// gradient norm that counts each replicated parameter once.
//
// Sharding (Distributed.sharding, ZeRO stages 1-3): given the sharding group, each rank keeps
// master weights and moments for its shard only (shard_layout.h: its piece of every unit of the
// flat buffers), updates it from the summed gradients of its pieces (GptModel::GradPiece) and
// all-gathers the compute-dtype parameters of each unit that is kept whole (stage 3 keeps the
// blocks' parameters sharded and gathers them before each use instead).
#pragma once

#include <vector>

#include "common/communicator.h"
#include "model/gpt.h"

namespace trainer {

class AdamW {
 public:
  // `shard_group`: the sharding group when the model's flat buffers are split over it
  // (partition().flat_shards == its size > 1), else nullptr.
  // `offload` (Distributed.sharding.sharding_offload): the master weights and moments live in
  // host memory and the CPU backend's AdamW updates them, chunk by chunk, from host copies of
  // the shard's gradients that stream through a ring of kOffloadRingSlots staging buffers of
  // `offload_chunk` elements; the compute-dtype weights go back to the model's backend
  // (adamw_offload.cpp). The chunk size changes no result, only the memory and the overlap.
  static constexpr size_t kOffloadChunkElements = size_t{32} << 20;  // 128 MiB of f32 gradients
  static constexpr int kOffloadRingSlots = 2;
  static Status Create(GptModel* model, const OptimizerConfig& config, Communicator* shard_group,
                       std::unique_ptr<AdamW>* out, bool offload = false,
                       size_t offload_chunk = kOffloadChunkElements);
  // Backend bytes that Create allocates for a model with `params` split into `shards` pieces:
  // master weights and moments of one piece (unless offloaded), and the device gradient norm
  // (arena sizing); and the host bytes that offload allocates instead: the state (12 bytes per
  // element of the piece) and the staging ring.
  static size_t BufferBytes(const std::vector<ParameterInfo>& params, int shards,
                            bool offload = false, bool halves = false);
  // Whether the master weights are kept as halves (Optimizer.store_param_remainders,
  // common/master_remainder.h): the bf16 parameters are their high halves and master_ holds the
  // low ones. Only where the state is on the model's backend and not sharded.
  static bool KeepsMasterHalves(const OptimizerConfig& config, DType compute_dtype, int shards,
                                bool offload);
  bool master_halves() const { return master_.dtype == DType::kU16; }
  static size_t OffloadedBytes(const std::vector<ParameterInfo>& params, int shards,
                               DType compute_dtype, size_t offload_chunk = kOffloadChunkElements);
  // Offload: the high-water mark of the host memory the state and the ring took (0 where the
  // host's allocator does not count it; the ring is counted on CPU ranks only).
  size_t OffloadPeakBytes() const;
  ~AdamW();

  bool sharded() const { return shard_group_ != nullptr; }
  bool offloaded() const { return host_ != nullptr; }
  // Set master weights (host f32, buffer order) and the model's compute copy from them.
  Status SetMaster(const std::vector<float>& flat);
  // Host copies of the whole state for checkpoints, in buffer order: which = 0 master, 1 first
  // moment, 2 second moment. When sharded, Download is collective over the DP group and uses the
  // gradient buffer as scratch (call it between steps); so does the master kept as halves (joined
  // there), and Upload(0) of halves, which sets the compute parameters too.
  Status Download(int which, std::vector<float>* flat) const;
  // The same into `host`, DownloadElements() floats (the flat buffers with their padding; the
  // first local_elements() hold the state): page-locked memory takes a GPU's copy at full speed.
  Status DownloadTo(int which, float* host) const;
  size_t DownloadElements() const;
  size_t local_elements() const { return total_; }  // the model's flat buffers on this rank
  // Offloaded and not sharded: the state itself in host memory (local_elements() floats, buffer
  // order), which a checkpoint reads between steps without a copy; null otherwise.
  const float* HostState(int which) const;
  Status Upload(int which, const std::vector<float>& flat);
  // Adds delta to the parameters [offset, offset + delta.size()) of the flat buffers outside the
  // gradient step: to the master weights this rank holds, and the model's compute copy set from
  // them (rounded to bf16 on the GPU; every rank calls it with the same delta). MoE's expert bias, which no gradient moves (its moments
  // stay zero), is updated this way after each step.
  Status AddToParameters(size_t offset, const std::vector<float>& delta);

  // Sharded only: sum the gradients of unit u (whole in `grads`) over the sharding group into
  // this rank's piece (GptModel::GradPiece).
  Status ReduceScatterGradients(int u, const Tensor& grads);
  // Squared L2 norm of the canonical gradients this rank updates, left in device memory (nothing
  // waits for the GPU). Summed over ranks it is the global one: over one DP replica, or over every
  // DP rank when sharded. Where this rank's sum is already global (no TP, PP or ZeRO-1 split),
  // StepClippedOnDevice clips by it without the host. experts_only: the canonical experts
  // (ShardKind::kSplitExperts) alone, for the ranks that count their experts but not the rest
  // (expert parallelism: the other EP ranks of DP rank 0's expert-DP index).
  // experts_added: the experts' share is in the sum already (StartGradNormSquared): add the rest.
  Status QueueLocalGradNormSquared(bool experts_only = false, bool experts_added = false);
  // Zeroes the device sum that QueueLocalGradNormSquared leaves and returns it (one f64), for the
  // experts' weight gradients to add their squares to as they are written
  // (GptModel::AddExpertGradSquaresTo), before QueueLocalGradNormSquared(false, true).
  Status StartGradNormSquared(Tensor* sum);
  // The sum that QueueLocalGradNormSquared left (waits for the GPU).
  Status QueuedGradNormSquared(double* out) const;
  // One step with learning rate lr; gradients are multiplied by grad_scale first (clipping).
  Status Step(int step, double lr, float grad_scale);
  // One step clipped to max_norm by the queued norm, GradientClipScale(norm, max_norm), which the
  // device works out: the host need not wait for the norm.
  Status StepClippedOnDevice(int step, double lr, double max_norm);

 private:
  AdamW() = default;
  Status StepWith(AdamWParams p);
  // Offload: the update on the host (adamw_offload.cpp), then the gather of the whole units.
  // Chunk i of the shard, [i * chunk, (i + 1) * chunk), streams through ring slot i % slots.
  Status SetUpOffload(size_t chunk);
  Status OffloadedStep(const AdamWParams& p);
  // The chunk's gradients to the host, then the slot's copy mark; the CPU AdamW once they are
  // there; the updated compute-dtype weights back to the model.
  Status QueueChunkGradients(size_t chunk);
  Status UpdateChunk(size_t chunk, const AdamWParams& p);
  Status QueueChunkWeights(size_t chunk);
  // Calls fn(unit, shard_begin, n) for each unit piece's overlap [shard_begin, + n) with the chunk.
  template <typename Fn>
  void ForEachPieceInChunk(size_t chunk, Fn fn) const;
  Status GatherWholeUnits();
  // Master halves: fn(param, remainder, scratch, at) for each piece [at, at + n) of the flat
  // buffers: its bf16 parameters, their remainders and n f32 of the gradient buffer as scratch.
  template <typename Fn>
  Status ForEachMasterPiece(Fn fn) const;
  // Where master_, m_ and v_ live: the host backend when offloaded, else the model's.
  Backend* state_backend() const { return host_ ? host_.get() : model_->backend(); }
  GptModel* model_ = nullptr;
  std::unique_ptr<Backend> host_;  // offload: the CPU backend that holds the state
  std::vector<void*> host_allocations_;
  // Offload's staging ring, chunk_ elements a slot: the gradients (f32), the updated weights
  // (f32, as the CPU AdamW writes them) and their compute-dtype copy (empty when that is f32).
  // Page-locked through the model's backend on a GPU (AllocateHost), else the host backend's.
  struct RingSlot {
    Tensor grads, params, compute;
  };
  std::vector<RingSlot> ring_;
  Backend* ring_backend_ = nullptr;
  std::vector<void*> ring_allocations_;
  size_t chunk_ = 0;
  // The update's segments, [to, to + n) of the shard with or without weight decay.
  struct Segment {
    size_t to, n;
    bool decayed;
  };
  std::vector<Segment> segments_;
  OptimizerConfig config_;
  Communicator* shard_group_ = nullptr;
  // shard_size_ elements each: this rank's pieces, back to back (master_: f32, or u16 when
  // master_halves()).
  Tensor master_, m_, v_;
  Tensor grad_norm_squared_;  // (1) f64, QueueLocalGradNormSquared's result
  size_t total_ = 0, shard_size_ = 0;
  // Contiguous [begin, end) element ranges of canonical parameters, for the norm, and of
  // decayed and non-decayed parameters (the first of each pair: decayed), for the update.
  std::vector<std::pair<size_t, size_t>> canonical_spans_;
  std::vector<std::pair<size_t, size_t>> expert_spans_;  // the canonical experts among them
  std::vector<std::pair<size_t, size_t>> dense_spans_;   // and the other canonical ones
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> decay_spans_;
  std::vector<void*> allocations_;
};

}  // namespace trainer
