// One pre-LayerNorm transformer block (attention + MLP), forward and backward, tensor-parallel:
// c_attn and c_fc are column-parallel (this rank's heads / FFN columns), the two c_proj are
// row-parallel and followed by an all-reduce over the TP group (one forward and one backward
// all-reduce per block half, as in Megatron-LM).
//
// With sequence parallelism the residual stream and the LayerNorms hold only this rank's block of
// the B*T rows (N/tp); the LayerNorm output is all-gathered before the column-parallel linear and
// the row-parallel output is reduce-scattered (instead of all-reduced) back to row blocks.
#pragma once

#include "common/communicator.h"
#include "model/backend.h"

namespace trainer {

// The weights (or their gradients) of one block, as this rank holds them.
struct BlockWeights {
  Tensor ln1_w, ln1_b;        // (C)
  Tensor attn_w, attn_b;      // (3C/tp, C), (3C/tp)
  Tensor proj_w, proj_b;      // (C, C/tp), (C)
  Tensor ln2_w, ln2_b;        // (C)
  Tensor fc_w, fc_b;          // (F/tp, C), (F/tp)
  Tensor fcproj_w, fcproj_b;  // (C, F/tp), (C)
};

// What the backward pass needs from the forward pass of one block and one micro-batch.
// R = rows of the residual stream on this rank: B*T, or B*T/tp with sequence parallelism.
struct BlockActivations {
  Tensor ln1_out, ln1_mean, ln1_rstd;  // (B,T,C) all rows, (R), (R)
  Tensor qkv;                          // (B,T,3C/tp)
  Tensor att_out, att_stats;           // (B,T,C/tp), (B,NH/tp,T)
  Tensor residual_mid;                 // (R,C) x + attention
  Tensor ln2_out, ln2_mean, ln2_rstd;  // (B,T,C) all rows, (R), (R)
  Tensor fc_pre, fc_out;               // (B,T,F/tp) before and after GELU
  Tensor residual_out;                 // (R,C) residual_mid + MLP
};

struct BlockScratch {
  Tensor proj;  // (B,T,C)
  Tensor dln;   // (B,T,C)
  Tensor dqkv;  // (B,T,3C/tp)
  Tensor datt;  // (B,T,C/tp)
  Tensor dfc;   // (B,T,F/tp)
  // Sequence parallelism only:
  Tensor rows;      // (R,C) a reduce-scattered projection or gradient
  Tensor ln_rows;   // (R,C) a LayerNorm output before its all-gather
  Tensor dres_all;  // (B,T,C) the all-gathered residual gradient
};

struct BlockContext {
  Backend* backend;
  Communicator* tp;
  int local_heads;
  bool sequence_parallel;
  BlockScratch scratch;
  // How BlockBackward writes the weight matrices' gradients (the biases' always accumulate).
  GradientWrite weight_gradients = GradientWrite::kAccumulate;
};

// Sequence-parallel plumbing, shared with the embedding and the LM head (gpt.cpp).
// LayerNorm target: scratch.ln_rows with sequence parallelism, else `all_rows` itself.
Tensor RowBlockTarget(const BlockContext& ctx, Tensor all_rows);
// all_rows = the row blocks of every TP rank (all-gather); nothing without sequence parallelism.
Status GatherRows(const BlockContext& ctx, Tensor row_block, Tensor all_rows);
// Sums a partial (B,T,C) over the TP group: into *out = scratch.rows (reduce-scatter) with
// sequence parallelism, else in place (all-reduce, *out = partial).
Status ReduceRows(const BlockContext& ctx, Tensor partial, Tensor* out);

// x (B,T,C) -> act.residual_out.
Status BlockForward(const BlockContext& ctx, const BlockWeights& w, Tensor x,
                    BlockActivations* act);
// dresidual (B,T,C): on entry d(residual_out), on exit d(x). Weight gradients accumulate in g.
Status BlockBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                     Tensor x, const BlockActivations& act, Tensor dresidual);

}  // namespace trainer
