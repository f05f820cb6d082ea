// Transformer block forward and backward (transformer_block.h).
#include "model/transformer_block.h"

namespace trainer {
namespace {

// Sum the partial results of a row-parallel linear (or the input gradient of a column-parallel
// one) over the TP group.
Status ReduceOverTp(const BlockContext& ctx, Tensor t) {
  if (ctx.tp == nullptr || ctx.tp->size() == 1) return Status::Ok();
  return ctx.tp->AllReduce(t.data, static_cast<size_t>(t.numel()), t.dtype, ReduceOp::kSum);
}

// The bias of a row-parallel linear is added once: by TP rank 0, before the all-reduce.
Tensor RowParallelBias(const BlockContext& ctx, Tensor bias) {
  return (ctx.tp == nullptr || ctx.tp->rank() == 0) ? bias : Tensor();
}

}  // namespace

Status BlockForward(const BlockContext& ctx, const BlockWeights& w, Tensor x,
                    BlockActivations* a) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  // Attention half.
  TRAINER_RETURN_IF_ERROR(
      be->LayerNormForward(a->ln1_out, a->ln1_mean, a->ln1_rstd, x, w.ln1_w, w.ln1_b));
  TRAINER_RETURN_IF_ERROR(
      be->MatmulForward(a->qkv, Tensor(), a->ln1_out, w.attn_w, w.attn_b, Activation::kNone));
  TRAINER_RETURN_IF_ERROR(be->AttentionForward(a->att_out, a->att_stats, a->qkv, ctx.local_heads));
  TRAINER_RETURN_IF_ERROR(be->MatmulForward(s.proj, Tensor(), a->att_out, w.proj_w,
                                            RowParallelBias(ctx, w.proj_b), Activation::kNone));
  TRAINER_RETURN_IF_ERROR(ReduceOverTp(ctx, s.proj));
  TRAINER_RETURN_IF_ERROR(be->AddLayerNormForward(a->residual_mid, a->ln2_out, a->ln2_mean,
                                                  a->ln2_rstd, x, s.proj, w.ln2_w, w.ln2_b));
  // MLP half.
  TRAINER_RETURN_IF_ERROR(
      be->MatmulForward(a->fc_out, a->fc_pre, a->ln2_out, w.fc_w, w.fc_b, Activation::kGelu));
  TRAINER_RETURN_IF_ERROR(be->MatmulForward(s.proj, Tensor(), a->fc_out, w.fcproj_w,
                                            RowParallelBias(ctx, w.fcproj_b), Activation::kNone));
  TRAINER_RETURN_IF_ERROR(ReduceOverTp(ctx, s.proj));
  return be->Add(a->residual_out, a->residual_mid, s.proj);
}

Status BlockBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                     Tensor x, const BlockActivations& a, Tensor dresidual) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  // MLP half: residual_out = residual_mid + fcproj(gelu(fc(ln2(residual_mid)))).
  // The row-parallel bias gradient is computed on every TP rank (dresidual is replicated), so the
  // replicas of the bias stay equal.
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(s.dfc, g.fcproj_w, g.fcproj_b, dresidual, a.fc_out, w.fcproj_w));
  TRAINER_RETURN_IF_ERROR(be->GeluBackward(s.dfc, s.dfc, a.fc_pre));
  TRAINER_RETURN_IF_ERROR(be->MatmulBackward(s.dln, g.fc_w, g.fc_b, s.dfc, a.ln2_out, w.fc_w));
  TRAINER_RETURN_IF_ERROR(ReduceOverTp(ctx, s.dln));
  TRAINER_RETURN_IF_ERROR(be->LayerNormBackward(dresidual, g.ln2_w, g.ln2_b, s.dln,
                                                a.residual_mid, w.ln2_w, a.ln2_mean, a.ln2_rstd));
  // Attention half: residual_mid = x + proj(attention(c_attn(ln1(x)))).
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(s.datt, g.proj_w, g.proj_b, dresidual, a.att_out, w.proj_w));
  TRAINER_RETURN_IF_ERROR(
      be->AttentionBackward(s.dqkv, s.datt, a.qkv, a.att_out, a.att_stats, ctx.local_heads));
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(s.dln, g.attn_w, g.attn_b, s.dqkv, a.ln1_out, w.attn_w));
  TRAINER_RETURN_IF_ERROR(ReduceOverTp(ctx, s.dln));
  return be->LayerNormBackward(dresidual, g.ln1_w, g.ln1_b, s.dln, x, w.ln1_w, a.ln1_mean,
                               a.ln1_rstd);
}

}  // namespace trainer
