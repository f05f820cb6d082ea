// The parameter registry: every parameter of this rank (from the model spec, model_spec.h) with
// its name, role, layer, full shape, the shape this rank holds, how the full tensor is split over
// the tensor-parallel group, and where it sits in the flat buffers. Checkpoints store full tensors
// by name, so any layout can read any checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "model/model_spec.h"

namespace trainer {

// Where this rank sits for the purpose of the model's parameters.
struct ModelPartition {
  int tp_rank = 0;
  int tp_size = 1;
  int ep_rank = 0;  // index in the expert-parallel group: holds experts
  int ep_size = 1;  // [ep_rank * E / ep_size, (ep_rank + 1) * E / ep_size)
  int pp_rank = 0;
  int pp_size = 1;
  int first_layer = 0;  // first transformer block held by this stage
  int num_layers = 0;   // blocks held by this stage
  // The flat buffers split into this many equal pieces: the sharding degree when the state is
  // sharded (Distributed.sharding, each sharding rank updates one piece), else 1.
  int flat_shards = 1;
  // The ZeRO stage (0: nothing sharded; 1 optimizer state; 2 + gradients; 3 + parameters). From
  // stage 2 on, the buffers are laid out in units (shard_layout.h): the parameters outside the
  // blocks, then one unit per block, each split into flat_shards pieces.
  int zero_stage = 0;
  int shard_rank = 0;  // this rank's index in the sharding group
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
};

struct ParameterInfo {
  std::string name;  // e.g. "transformer.h.0.attn.c_attn.weight"
  ParamRole role = ParamRole::kTokenEmbedding;
  ParamRole lora_base = ParamRole::kTokenEmbedding;  // kLoraA/kLoraB: the linear adapted
  int layer = -1;                                    // block index, -1 outside the blocks
  std::vector<int64_t> full_shape;                   // e.g. {3C, C}
  std::vector<int64_t> local_shape;
  ShardKind shard = ShardKind::kReplicated;
  size_t offset = 0;         // element offset into the flat parameter/gradient/optimizer buffers
  bool weight_decay = true;  // false for biases and norm weights (as nanoGPT: dim < 2)
  // Stored right before the next parameter with no padding between (q, k, v; gate, up), so that
  // their local shards form one matrix.
  bool contiguous_with_next = false;
  // The canonical holder: counted in the gradient norm and written to checkpoints from this rank
  // (with the experts' DP index 0 for them, the DP index 0 for the rest).
  // False on TP ranks > 0 for replicated tensors (the experts among them), and for the last stage's copy of the tied
  // token embedding when pp_size > 1.
  bool canonical = true;
  // True for the last stage's copy of the tied token embedding (the LM head) when pp_size > 1:
  // its gradient is summed with stage 0's over the embedding group.
  bool tied_copy = false;
  // Its gradient is summed over the TP group before the optimizer step: norms of the residual
  // stream under sequence parallelism (each TP rank sees only its rows), and the q/k norms (each
  // TP rank sees only its heads).
  bool grad_sum_over_tp = false;

  int64_t local_numel() const {
    int64_t n = 1;
    for (int64_t s : local_shape) n *= s;
    return n;
  }
  int64_t full_numel() const {
    int64_t n = 1;
    for (int64_t s : full_shape) n *= s;
    return n;
  }
};

// Blocks per pipeline stage: `pp_layers` when given, else balanced (earlier stages take the
// remainder).
std::vector<int> StageLayerCounts(int num_layers, int pp_size, const std::vector<int>& pp_layers);
// ep_size: the EP group's size where this partition's ranks split the experts (the trainer,
// the memory plan), 1 where one process holds the whole model.
ModelPartition MakePartition(const ModelConfig& model, const DistributedConfig& dist, int tp_rank,
                             int pp_rank, int ep_rank = 0, int ep_size = 1);

// The parameters this rank trains, in buffer order (decayed tensors first, then the rest, so that
// AdamW runs in two launches; from ZeRO stage 2 on, that order within each unit: the tensors
// outside the blocks, then block by block, each unit padded to 64 x flat_shards elements);
// offsets filled in. With LoRA (Model.lora_rank > 0): the adapters only (lora.h); else the
// model's weights.
std::vector<ParameterInfo> BuildParameterList(const ModelConfig& model, const ModelPartition& part);
// The model's weights on this rank (without adapters), whether they train or not.
std::vector<ParameterInfo> BuildBaseParameterList(const ModelConfig& model,
                                                  const ModelPartition& part);
// The frozen weights on this rank, offsets into a buffer of their own: with LoRA the base
// weights, else none.
std::vector<ParameterInfo> BuildFrozenParameterList(const ModelConfig& model,
                                                    const ModelPartition& part);
// Every trained parameter of the model, as one rank holding all of it would see it (tp 1, pp 1).
std::vector<ParameterInfo> FullParameterList(const ModelConfig& model);
// Every base weight of the model, likewise (FullParameterList without LoRA).
std::vector<ParameterInfo> FullBaseParameterList(const ModelConfig& model);
// Total elements of the local flat buffers.
size_t TotalLocalElements(const std::vector<ParameterInfo>& params);
// Elements of the flat buffers as allocated: TotalLocalElements rounded up so that they split
// into `shards` equal 64-element-aligned pieces (the tail past TotalLocalElements stays zero).
size_t FlatBufferElements(const std::vector<ParameterInfo>& params, int shards);
// Index of the first non-decayed parameter (the split between the two AdamW spans).
size_t FirstNoDecayElement(const std::vector<ParameterInfo>& params);

// The group a parameter's shard kind splits it over, and this rank's place in it: the TP group,
// or the EP group for kSplitExperts. `rank` and `size` for the shard functions below.
struct ShardSlot {
  int rank = 0, size = 1;
};
ShardSlot ShardSlotOf(const ParameterInfo& p, const ModelPartition& part);

// Copy shard `rank` of `size` out of a full tensor (host f32), and back.
void ExtractShard(const ParameterInfo& p, int rank, int size, const float* full, float* local);
void InsertShard(const ParameterInfo& p, int rank, int size, const float* local, float* full);

// GPT-2 initialisation of a full tensor, a pure function of (seed, name, role): normal(0, 0.02),
// residual projections (attention output and MLP output weights) scaled by 1/sqrt(2*num_layers),
// biases zero, norm weights one. Identical whatever the layout.
void InitFullTensor(const ModelConfig& model, uint64_t seed, const ParameterInfo& p, float* out);
// This rank's initial parameters as a host f32 flat array in buffer order (padding zero).
std::vector<float> InitialParameterValues(const ModelConfig& model, const ModelPartition& part,
                                          const std::vector<ParameterInfo>& params, uint64_t seed);

}  // namespace trainer
