// One pre-norm transformer block (attention + MLP), forward and backward, tensor-parallel, for
// every architecture of the model spec (model_spec.h): LayerNorm or RMSNorm; a fused qkv
// projection with optional bias, optional per-head q/k RMSNorm and RoPE, then causal
// (grouped-query) attention; a GELU or SwiGLU MLP. The qkv and the MLP's first linear (c_fc, or
// gate and up side by side) are column-parallel (this rank's heads / FFN columns), the two output
// projections row-parallel and followed by an all-reduce over the TP group (one forward and one
// backward all-reduce per block half, as in Megatron-LM). A MoE layer (moe_layer.h) takes the
// MLP's place where the spec says; it is not split over TP (every rank computes all of it).
//
// With sequence parallelism the residual stream and the norms hold only this rank's block of
// the B*T rows (N/tp); the norm's output is all-gathered before the column-parallel linear and
// the row-parallel output is reduce-scattered (instead of all-reduced) back to row blocks.
//
// Hidden dropout (Model.hidden_dropout) drops each output projection's sum before the residual
// add (fused with it where the backend can), attention dropout the attention probabilities.
#pragma once

#include "common/communicator.h"
#include "model/backend.h"
#include "model/lora.h"
#include "model/model_spec.h"
#include "model/moe_layer.h"

namespace trainer {

// The weights (or their gradients) of one block, as this rank holds them.
// Q = (NH + 2 NKV) HD / tp, the width of this rank's qkv; A = NH HD / tp, of its attention
// output. Biases and the norms' biases are empty where the architecture has none.
struct BlockWeights {
  Tensor ln1_w, ln1_b;        // (C)
  Tensor attn_w, attn_b;      // (Q, C), (Q)
  Tensor q_norm, k_norm;      // (HD) Qwen3's per-head q/k RMSNorm, else empty
  Tensor proj_w, proj_b;      // (C, A), (C)
  Tensor ln2_w, ln2_b;        // (C)
  Tensor fc_w, fc_b;          // GELU: (F/tp, C), (F/tp); SwiGLU: [gate; up] (2F/tp, C)
  Tensor fcproj_w, fcproj_b;  // (C, F/tp), (C)
  MoeWeights moe;             // a MoE layer's (then fc_w, fcproj_w are empty), else empty

  LoraAdapters lora[kLoraGroups];  // Model.lora_*: the adapters of this block's linears
};

// What the backward pass needs from the forward pass of one block and one micro-batch.
// R = rows of the residual stream on this rank: B*T, or B*T/tp with sequence parallelism.
// The norms' mean is empty for RMSNorm.
struct BlockActivations {
  Tensor ln1_out, ln1_mean, ln1_rstd;  // (B,T,C) all rows, (R), (R)
  Tensor qkv_pre, qkv_rstd;            // q/k norm: (B,T,Q) its input, (B*T, (NH+NKV)/tp)
  Tensor qkv;                          // (B,T,Q) after the q/k norm and RoPE
  Tensor att_out, att_stats;           // (B,T,A), (B,NH/tp,T)
  Tensor residual_mid;                 // (R,C) x + attention
  Tensor ln2_out, ln2_mean, ln2_rstd;  // (B,T,C) all rows, (R), (R)
  Tensor fc_pre, fc_out;  // GELU: (B,T,F/tp) before and after; SwiGLU: (B,T,2F/tp), (B,T,F/tp)
  Tensor residual_out;    // (R,C) residual_mid + MLP
  MoeActivations moe;     // a MoE layer's (then fc_pre, fc_out are empty)

  Tensor lora_u[kLoraGroups];  // (B,T,G r) each adapter group's scale * x A^T (lora.h)
};

struct BlockScratch {
  Tensor proj;  // (B,T,C)
  Tensor dln;   // (B,T,C)
  Tensor dqkv;  // (B,T,Q)
  Tensor datt;  // (B,T,A)
  Tensor dfc;   // GELU: (B,T,F/tp); SwiGLU: (B,T,2F/tp)
  Tensor dact;  // SwiGLU: (B,T,F/tp) the gradient of its output
  // Sequence parallelism only:
  Tensor rows;      // (R,C) a reduce-scattered projection or gradient
  Tensor ln_rows;   // (R,C) a LayerNorm output before its all-gather
  Tensor dres_all;  // (B,T,C) the all-gathered residual gradient
  MoeScratch moe;   // MoE layers' backward buffers
  // Hidden dropout only:
  Tensor ddrop;  // (B,T,C) the residual gradient through an output projection's dropout
};

struct BlockContext {
  Backend* backend;
  Communicator* tp;
  Communicator* ep = nullptr;  // the expert-parallel group (MoE layers), null without EP
  const ModelSpec* spec;
  int local_heads;
  int local_kv_heads;
  Tensor rope;  // (2, maxT, HD/2) f32 RoPE table, empty without RoPE
  // Data.packing: documents: the micro-batch's (B,T) i32 document starts (Backend's
  // AttentionForward, RopeForward); empty: each sample is one sequence. documents: their count
  // and longest length, measured on the host.
  Tensor doc_starts;
  DocumentShape documents;
  bool sequence_parallel;
  BlockScratch scratch;
  // How BlockBackward writes the weight matrices' gradients (the biases' always accumulate).
  GradientWrite weight_gradients = GradientWrite::kAccumulate;
  // Model.recompute=selective: ln1_out and ln2_out share one buffer, which BlockBackward fills
  // again (the norm from its input, then the all-gather under sequence parallelism) before each
  // GEMM that reads it.
  bool recompute_norms = false;
  // MoE layers: d(objective)/d(a micro-batch's aux and z losses) (forward), whether the forward
  // adds the micro-batch to the layer's stats, and whether it is a recomputation in backward
  // (which reuses the first forward's loss scale).
  float moe_loss_scale = 0.f;
  bool moe_record = false;
  bool moe_recompute = false;
  // Backward: kRemake where the layers share the MLP activation's output (Model.recompute gelu
  // and selective): BlockBackward makes it again. A MoE layer's experts and a SwiGLU MLP without
  // an adapter on its down projection write it in the pass that forms SwiGLU's gradient, before
  // the down projection's weight gradient reads it; GELU and an adapted down projection have it
  // made by a pass of its own first (MlpBackward).
  SwiGluAct mlp_act_source = SwiGluAct::kRead;
  // The micro-batch's dropout (philox.h; off unless it trains with Model.*_dropout > 0): after
  // the output projections (kind and layer set per use) and on the attention probabilities.
  // Dropout draws the same mask again wherever it is needed (backward, recomputation).
  DropoutKey hidden_dropout, attention_dropout;
  int layer = -1;  // the global index of the block being run
  // gpt2 with Model.bias: false: LayerNorm's constant zero bias (C) and its gradient's sink (C).
  Tensor zero_bias, dbias_sink;
  LoraContext lora;  // Model.lora_*: scale and scratch of the adapters
  // MoE layers' backward: where given, the experts' weight gradients add the sums of their
  // squares to it (one f64; GptModel::AddExpertGradSquaresTo).
  Tensor expert_grad_squares;
};

// The spec's norm (LayerNorm with mean, rstd, bias; or RMSNorm with rstd only), shared with the
// final norm (gpt.cpp): the Backend's LayerNorm* or RmsNorm* ops.
Status NormForward(const BlockContext& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor in,
                   Tensor weight, Tensor bias);
Status AddNormForward(const BlockContext& ctx, Tensor residual, Tensor out, Tensor mean,
                      Tensor rstd, Tensor a, Tensor b, Tensor weight, Tensor bias);
// din += ; din_sums (LayerNorm only) as LayerNormBackward's.
Status NormBackward(const BlockContext& ctx, Tensor din, Tensor dweight, Tensor dbias,
                    Tensor din_sums, Tensor dout, Tensor in, Tensor weight, Tensor mean,
                    Tensor rstd);

// Sequence-parallel plumbing, shared with the embedding and the LM head (gpt.cpp).
// LayerNorm target: scratch.ln_rows with sequence parallelism, else `all_rows` itself.
Tensor RowBlockTarget(const BlockContext& ctx, Tensor all_rows);
// all_rows = the row blocks of every TP rank (all-gather); nothing without sequence parallelism.
Status GatherRows(const BlockContext& ctx, Tensor row_block, Tensor all_rows);
// Sums a partial (B,T,C) over the TP group: into *out = scratch.rows (reduce-scatter) with
// sequence parallelism, else in place (all-reduce, *out = partial).
Status ReduceRows(const BlockContext& ctx, Tensor partial, Tensor* out);
// The hidden dropout key of `kind` for `rows` of the residual stream: this rank's row block
// (row_block, under sequence parallelism) or all B*T rows.
DropoutKey HiddenDropoutKey(const BlockContext& ctx, uint32_t kind, int layer, bool row_block,
                            Tensor rows);

// x (B,T,C) -> act.residual_out.
Status BlockForward(const BlockContext& ctx, const BlockWeights& w, Tensor x,
                    BlockActivations* act);
// dresidual (B,T,C): on entry d(residual_out), on exit d(x). Weight gradients accumulate in g.
Status BlockBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                     Tensor x, const BlockActivations& act, Tensor dresidual);

}  // namespace trainer
