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
// the same code. An adapter whose output is a column block of its base's (q, k and v of the
// fused local qkv; gate and up) adds into that block in place, and its backward reads the
// block's gradient in place (Backend::MatmulAddToColumns, MatmulBackwardFromColumns): no copy
// of the base's whole width.
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

// Where an adapter sits in a block (BlockWeights::lora, BlockActivations::lora_u).
enum LoraSlot { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kLoraSlots };

// The base roles of Model.lora_targets (lora_targets.h) in block order; gpt2's c_proj is both
// output projections. Empty when LoRA is off.
std::vector<ParamRole> LoraBaseRoles(const ModelConfig& model);
// The block slot of an adapted base role.
LoraSlot LoraSlotOf(ParamRole base);
// PEFT's name: "model.layers.0.self_attn.q_proj.lora_A.weight" for A of q in block 0.
std::string LoraParameterName(const ModelSpec& spec, ParamRole base, int layer, bool b);
// The adapters of blocks [first_layer, first_layer + num_layers), A then B per target.
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

// Buffers of one block's adapter passes, shared by every adapter, block and slot.
// N = B*T rows; In = the widest input among the adapted linears.
struct LoraScratch {
  Tensor du;       // (N, r) compute
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

// y (N, base_width) += scale * (x A^T) B^T, into its columns of y; u (N, r) = scale * x A^T is
// kept for backward. x (N, in_local).
Status LoraForward(const LoraContext& ctx, const LoraAdapter& w, Tensor x, Tensor u, Tensor y);
// dy (N, base_width) the gradient of the base linear's output; g.a, g.b (f32) += the adapter's
// gradients; dx (N, in_local) += its input gradient.
Status LoraBackward(const LoraContext& ctx, const LoraAdapter& w, const LoraAdapter& g, Tensor x,
                    Tensor u, Tensor dy, Tensor dx);

}  // namespace trainer
