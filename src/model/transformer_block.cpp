// Transformer block forward and backward (transformer_block.h).
#include "model/transformer_block.h"

namespace trainer {
namespace {

bool Parallel(const BlockContext& ctx) {
  return ctx.tp != nullptr && ctx.tp->size() > 1;
}
bool SequenceParallel(const BlockContext& ctx) {
  return Parallel(ctx) && ctx.sequence_parallel;
}

// The bias of a row-parallel linear is added once: by TP rank 0, before the all-reduce (or
// reduce-scatter).
Tensor RowParallelBias(const BlockContext& ctx, Tensor bias) {
  return (ctx.tp == nullptr || ctx.tp->rank() == 0) ? bias : Tensor();
}

}  // namespace

Tensor RowBlockTarget(const BlockContext& ctx, Tensor all_rows) {
  return SequenceParallel(ctx) ? ctx.scratch.ln_rows : all_rows;
}

Status GatherRows(const BlockContext& ctx, Tensor row_block, Tensor all_rows) {
  if (!SequenceParallel(ctx)) return Status::Ok();
  return ctx.tp->AllGather(row_block.data, all_rows.data, static_cast<size_t>(row_block.numel()),
                           row_block.dtype);
}

Status ReduceRows(const BlockContext& ctx, Tensor partial, Tensor* out) {
  *out = partial;
  if (!Parallel(ctx)) return Status::Ok();
  const size_t n = static_cast<size_t>(partial.numel());
  if (!SequenceParallel(ctx))
    return ctx.tp->AllReduce(partial.data, n, partial.dtype, ReduceOp::kSum);
  *out = ctx.scratch.rows;
  return ctx.tp->ReduceScatter(partial.data, out->data, n / ctx.tp->size(), partial.dtype);
}

Status BlockForward(const BlockContext& ctx, const BlockWeights& w, Tensor x, BlockActivations* a) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  // Without TP, each residual add rides the output projection's GEMM; with TP, the projection's
  // partial sums are reduced over the group first.
  const bool tp = Parallel(ctx);
  Tensor summed;
  // Attention half.
  Tensor ln = RowBlockTarget(ctx, a->ln1_out);
  TRAINER_RETURN_IF_ERROR(be->LayerNormForward(ln, a->ln1_mean, a->ln1_rstd, x, w.ln1_w, w.ln1_b));
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, ln, a->ln1_out));
  TRAINER_RETURN_IF_ERROR(
      be->MatmulForward(a->qkv, Tensor(), a->ln1_out, w.attn_w, w.attn_b, Activation::kNone));
  TRAINER_RETURN_IF_ERROR(be->AttentionForward(a->att_out, a->att_stats, a->qkv, ctx.local_heads));
  ln = RowBlockTarget(ctx, a->ln2_out);
  if (tp) {
    TRAINER_RETURN_IF_ERROR(be->MatmulForward(s.proj, Tensor(), a->att_out, w.proj_w,
                                              RowParallelBias(ctx, w.proj_b), Activation::kNone));
    TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.proj, &summed));
    TRAINER_RETURN_IF_ERROR(be->AddLayerNormForward(a->residual_mid, ln, a->ln2_mean, a->ln2_rstd,
                                                    x, summed, w.ln2_w, w.ln2_b));
  } else {
    TRAINER_RETURN_IF_ERROR(
        be->MatmulForwardAddResidual(a->residual_mid, a->att_out, w.proj_w, w.proj_b, x));
    TRAINER_RETURN_IF_ERROR(
        be->LayerNormForward(ln, a->ln2_mean, a->ln2_rstd, a->residual_mid, w.ln2_w, w.ln2_b));
  }
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, ln, a->ln2_out));
  // MLP half.
  TRAINER_RETURN_IF_ERROR(
      be->MatmulForward(a->fc_out, a->fc_pre, a->ln2_out, w.fc_w, w.fc_b, Activation::kGelu));
  if (!tp)
    return be->MatmulForwardAddResidual(a->residual_out, a->fc_out, w.fcproj_w, w.fcproj_b,
                                        a->residual_mid);
  TRAINER_RETURN_IF_ERROR(be->MatmulForward(s.proj, Tensor(), a->fc_out, w.fcproj_w,
                                            RowParallelBias(ctx, w.fcproj_b), Activation::kNone));
  TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.proj, &summed));
  return be->Add(a->residual_out, a->residual_mid, summed);
}

// The k and v thirds of the qkv bias gradient without a pass over dqkv. Softmax ignores a
// constant added to a row of scores, and a k bias adds q_i . b_k to every score of row i: the
// k bias gradient is zero. A v bias adds b_v to every attention output row (each row of the
// attention weights sums to one), so its gradient is the column sum of the attention output's
// gradient, sum_i dO_i = (sum_i dY_i) W_proj: the projection's bias gradient (already summed,
// over every micro-batch so far) times W_proj, a (C) x (C, C/tp) product written afresh after
// each micro-batch. The k third keeps the zero that ZeroGradients wrote.
namespace {
Status AttentionBiasGradients(const BlockContext& ctx, const BlockWeights& w,
                              const BlockWeights& g) {
  Backend* be = ctx.backend;
  const int64_t local_c = g.attn_b.numel() / 3;
  const Tensor v_bias = g.attn_b.rows(2 * local_c, local_c);
  TRAINER_RETURN_IF_ERROR(be->Zero(v_bias));
  return be->ColumnSums(v_bias, w.proj_w, 0, g.proj_b);
}
}  // namespace

Status BlockBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                     Tensor x, const BlockActivations& a, Tensor dresidual) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  // The row-parallel linears need the gradient of every row; their bias gradient is then the
  // same on every TP rank, so the replicas of the bias stay equal.
  const Tensor dres_all = SequenceParallel(ctx) ? s.dres_all : dresidual;
  // Without TP, the output projections' bias gradients are column sums of the residual gradient,
  // which the LayerNorm backward after each one reads anyway: it sums them there.
  const bool ln_sums = !Parallel(ctx);
  const Tensor fcproj_db = ln_sums ? Tensor() : g.fcproj_b, proj_db = ln_sums ? Tensor() : g.proj_b;
  Tensor dln;
  // MLP half: residual_out = residual_mid + fcproj(gelu(fc(ln2(residual_mid)))).
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, dresidual, dres_all));
  const GradientWrite dw = ctx.weight_gradients;
  // fc's bias gradient is the column sums of dfc, summed as dfc is made.
  TRAINER_RETURN_IF_ERROR(be->MatmulBackwardThroughGelu(
      s.dfc, g.fcproj_w, fcproj_db, dres_all, a.fc_out, w.fcproj_w, a.fc_pre, g.fc_b, dw));
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(s.dln, g.fc_w, Tensor(), s.dfc, a.ln2_out, w.fc_w, dw));
  TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.dln, &dln));
  TRAINER_RETURN_IF_ERROR(be->LayerNormBackward(dresidual, g.ln2_w, g.ln2_b,
                                                ln_sums ? g.fcproj_b : Tensor(), dln,
                                                a.residual_mid, w.ln2_w, a.ln2_mean, a.ln2_rstd));
  // Attention half: residual_mid = x + proj(attention(c_attn(ln1(x)))).
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, dresidual, dres_all));
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(s.datt, g.proj_w, proj_db, dres_all, a.att_out, w.proj_w, dw));
  TRAINER_RETURN_IF_ERROR(
      be->AttentionBackward(s.dqkv, s.datt, a.qkv, a.att_out, a.att_stats, ctx.local_heads));
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(s.dln, g.attn_w, Tensor(), s.dqkv, a.ln1_out, w.attn_w, dw));
  // The qkv bias gradient reads only the q third of dqkv (see AttentionBiasGradients).
  const int64_t local_c = g.attn_b.numel() / 3;
  TRAINER_RETURN_IF_ERROR(be->ColumnSums(g.attn_b.rows(0, local_c), s.dqkv, 0, Tensor()));
  TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.dln, &dln));
  TRAINER_RETURN_IF_ERROR(be->LayerNormBackward(dresidual, g.ln1_w, g.ln1_b,
                                                ln_sums ? g.proj_b : Tensor(), dln, x, w.ln1_w,
                                                a.ln1_mean, a.ln1_rstd));
  // Last: without TP, g.proj_b is complete only once ln1's backward has summed it (ln_sums).
  return AttentionBiasGradients(ctx, w, g);
}

}  // namespace trainer
