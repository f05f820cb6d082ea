// LoRA (Hu et al. 2021, as PEFT implements it): a frozen linear y = x W^T gains a low-rank
// update, y = x W^T + scale * (x A^T) B^T, with A (r, in), B (out, r), scale = alpha / r. Only A
// and B train; W, and every other weight of the model, stay frozen (no gradient, no optimizer
// state). Init as PEFT: A kaiming-uniform (a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zero.
//
// Tensor parallelism splits an adapter to match its base linear. Column-parallel base (q, k, v,
// gate, up; c_attn, c_fc): A whole on every TP rank, B split over `out` like W; A's gradient is
// partial on each rank and summed over the TP group (grad_sum_over_tp), and so is the input
// gradient, where the base's is. Row-parallel base (o, down; c_proj): A split over `in` like W,
// B whole; x A^T is then a partial sum, and so is the update: it joins the base's partial
// products before their all-reduce, and B's gradient is summed over the TP group.
//
// Everything runs through the backend's matmul ops, so the CPU (fp32) and GPU (bf16) paths are
// the same code. The adapters of one block that read the same input form a group (LoraGroup: q,
// k and v; o; gate and up; down) whose A's lie back to back, so that one GEMM makes the group's
// x A^T and one its input gradient. Each member's output is a column block of its base's (q, k
// and v of the fused local qkv; gate and up), written or added to in place, and its backward
// reads the block's gradient in place (Backend::MatmulColumns, MatmulBackwardColumns): no copy of
// the base's whole width. Where a group's blocks cover the base output, the adapters write it and
// the frozen base GEMM adds onto it in its epilogue (transformer_block.cpp); in backward the
// group writes the input gradient and the base GEMM adds onto it: each is one pass over the
// wide matrix by the skinny GEMM instead of a read and a write after the base GEMM.
//
// Model.lora_dropout (PEFT's lora_dropout): y = x W^T + scale * (dropout(x) A^T) B^T while
// training, the mask drawn from philox.h (kind kDropoutLora + the adapter's slot, the block's
// layer, the sample's place in the global batch, the position and the GLOBAL input channel, so
// that a row-parallel adapter's TP shards draw the columns of the whole); drawn again in
// backward, never stored. Evaluation, sampling and export draw none.
#pragma once

#include <string>
#include <vector>

#include "model/backend.h"
#include "model/model_spec.h"

namespace trainer {

// Where an adapter sits in a block (its group: LoraGroupOf).
enum LoraSlot { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kLoraSlots };

// The base roles of Model.lora_targets (lora_targets.h) in block order; gpt2's c_proj is both
// output projections. Empty when LoRA is off.
std::vector<ParamRole> LoraBaseRoles(const ModelConfig& model);
// The block slot of an adapted base role.
LoraSlot LoraSlotOf(ParamRole base);
// PEFT's name: "model.layers.0.self_attn.q_proj.lora_A.weight" for A of q in block 0.
std::string LoraParameterName(const ModelSpec& spec, ParamRole base, int layer, bool b);
// The adapters of blocks [first_layer, first_layer + num_layers): per block and group
// (LoraGroup), the members' A's back to back, then their B's.
std::vector<ParameterSpec> LoraSpecParameters(const ModelSpec& spec, int tp_size, int first_layer,
                                              int num_layers);

// One adapter as this rank holds it: a (r, in_local), b (out_local, r); empty where the block's
// linear has none. Its output is columns [first_column, first_column + out_local) of the base
// linear's local output, which is `base_width` wide.
struct LoraAdapter {
  Tensor a, b;
  int64_t first_column = 0;
  int64_t base_width = 0;
  LoraSlot slot = kLoraQ;
  int64_t first_input = 0;  // the global input channel of x's column 0 (row-parallel under TP)
  bool present() const { return !a.empty(); }
};

// The adapters of a block that share their input and their base linear's output, in forward
// order: q, k and v on the fused qkv (GPT-2: c_attn alone); o; gate and up on the fused gate/up
// (GPT-2: c_fc); down.
enum LoraGroup { kLoraQkv, kLoraAttnOut, kLoraMlpIn, kLoraMlpOut, kLoraGroups };
LoraGroup LoraGroupOf(LoraSlot slot);

// One group as this rank holds it (BlockWeights::lora): its adapted members in slot order. Their
// A's lie back to back in the parameter and gradient buffers (LoraSpecParameters), so `a` is
// their stack (G r, in_local), and x a^T holds member i's x A_i^T in columns [i r, (i+1) r):
// one matrix product for the whole group where the members read the same input.
struct LoraAdapters {
  static constexpr int kMaxMembers = 3;
  LoraAdapter member[kMaxMembers];
  int size = 0;
  Tensor a;  // (G r, in_local)
  bool present() const { return size > 0; }
  // The members' output blocks tile the base output, side by side from column 0.
  bool covers_output() const;
};

// The group `group` of the present adapters among `slots` (indexed by LoraSlot), with their
// stacked A; that is empty where the A's do not lie back to back (LoraForward and LoraBackward
// then refuse, naming the bug).
LoraAdapters GroupLoraAdapters(const LoraAdapter* slots, LoraGroup group);

// Buffers of one block's adapter passes, shared by every adapter, block and slot.
// N = B*T rows; In = the widest input among the adapted linears.
struct LoraScratch {
  Tensor du;       // (N, G r) compute, G the largest group: a group's gradient of its x A^T
  Tensor dropped;  // (N, In) compute: the input after Model.lora_dropout (empty without it)
  Tensor din;      // (N, In) compute: the input gradient before that dropout (empty without it)
};

struct LoraContext {
  Backend* backend = nullptr;
  float scale = 0.f;
  LoraScratch scratch;
  // The micro-batch's Model.lora_dropout key (layer set; kind and first_column per adapter); p
  // 0: off.
  DropoutKey dropout;
};

// The Model.lora_dropout key of adapter w's input (ctx.dropout with its kind and columns).
DropoutKey AdapterDropoutKey(const LoraContext& ctx, const LoraAdapter& w);

// Each member's update scale * (x A_i^T) B_i^T into its columns of y (N, base_width): added
// to what y holds (y_write kAccumulate), or written over it (kOverwrite, where the group covers
// y: the base linear's GEMM then adds onto it). u (N, G r) = scale * x a^T is kept for backward.
// x (N, in_local).
Status LoraForward(const LoraContext& ctx, const LoraAdapters& w, Tensor x, Tensor u, Tensor y,
                   GradientWrite y_write);
// dy (N, base_width) the gradient of the base linear's output; g's A's and B's (f32) += the
// adapters' gradients; dx (N, in_local) = (or +=, by dx_write) the group's input gradient.
Status LoraBackward(const LoraContext& ctx, const LoraAdapters& w, const LoraAdapters& g, Tensor x,
                    Tensor u, Tensor dy, Tensor dx, GradientWrite dx_write);

}  // namespace trainer
