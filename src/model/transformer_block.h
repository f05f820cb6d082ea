// One pre-LayerNorm transformer block (attention + MLP), forward and backward, tensor-parallel:
// c_attn and c_fc are column-parallel (this rank's heads / FFN columns), the two c_proj are
// row-parallel and followed by an all-reduce over the TP group (one forward and one backward
// all-reduce per block half, as in Megatron-LM).
#pragma once

#include "common/communicator.h"
#include "model/backend.h"

namespace trainer {

// The weights (or their gradients) of one block, as this rank holds them.
struct BlockWeights {
  Tensor ln1_w, ln1_b;      // (C)
  Tensor attn_w, attn_b;    // (3C/tp, C), (3C/tp)
  Tensor proj_w, proj_b;    // (C, C/tp), (C)
  Tensor ln2_w, ln2_b;      // (C)
  Tensor fc_w, fc_b;        // (F/tp, C), (F/tp)
  Tensor fcproj_w, fcproj_b;  // (C, F/tp), (C)
};

// What the backward pass needs from the forward pass of one block and one micro-batch.
struct BlockActivations {
  Tensor ln1_out, ln1_mean, ln1_rstd;  // (B,T,C), (B*T), (B*T)
  Tensor qkv;                          // (B,T,3C/tp)
  Tensor att_out, att_stats;           // (B,T,C/tp), (B,NH/tp,T)
  Tensor residual_mid;                 // (B,T,C) x + attention
  Tensor ln2_out, ln2_mean, ln2_rstd;  // (B,T,C), (B*T), (B*T)
  Tensor fc_pre, fc_out;               // (B,T,F/tp) before and after GELU
  Tensor residual_out;                 // (B,T,C) residual_mid + MLP
};

struct BlockScratch {
  Tensor proj;  // (B,T,C)
  Tensor dln;   // (B,T,C)
  Tensor dqkv;  // (B,T,3C/tp)
  Tensor datt;  // (B,T,C/tp)
  Tensor dfc;   // (B,T,F/tp)
};

struct BlockContext {
  Backend* backend;
  Communicator* tp;
  int local_heads;
  BlockScratch scratch;
};

// x (B,T,C) -> act.residual_out.
Status BlockForward(const BlockContext& ctx, const BlockWeights& w, Tensor x,
                    BlockActivations* act);
// dresidual (B,T,C): on entry d(residual_out), on exit d(x). Weight gradients accumulate in g.
Status BlockBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                     Tensor x, const BlockActivations& act, Tensor dresidual);

}  // namespace trainer
