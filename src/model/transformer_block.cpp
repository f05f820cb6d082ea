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

// A MoE layer's whole (B*T, C) result, as the residual stream holds it on this rank: this TP
// rank's row block under sequence parallelism, else all of it.
Tensor OwnRows(const BlockContext& ctx, Tensor all_rows) {
  if (!SequenceParallel(ctx)) return all_rows;
  const int64_t R = Rows(all_rows) / ctx.tp->size();
  return MatrixRows(all_rows, ctx.tp->rank() * R, R);
}

MoeContext MoeCtx(const BlockContext& ctx) {
  MoeContext m;
  m.backend = ctx.backend;
  m.spec = &ctx.spec->moe;
  m.ep = ctx.ep;
  m.scratch = ctx.scratch.moe;
  m.loss_scale = ctx.moe_loss_scale;
  m.record = ctx.moe_record;
  m.recompute = ctx.moe_recompute;
  m.rebuild_x_perm = ctx.recompute_norms;  // selective: the layers share x_perm
  m.act_source = ctx.mlp_act_source;
  m.weight_gradients = ctx.weight_gradients;
  m.grad_squares = ctx.expert_grad_squares;
  return m;
}

// The attention probabilities' key: this rank's heads are global heads tp_rank * local_heads on.
DropoutKey AttentionDropoutKey(const BlockContext& ctx) {
  DropoutKey k = ctx.attention_dropout;
  k.kind = kDropoutAttnProbs;
  k.layer = ctx.layer;
  k.first_head = ctx.tp ? ctx.tp->rank() * ctx.local_heads : 0;
  return k;
}

// The adapters' context in this block (its layer keys Model.lora_dropout's masks).
LoraContext LoraOfLayer(const BlockContext& ctx) {
  LoraContext lora = ctx.lora;
  lora.dropout.layer = ctx.layer;
  return lora;
}

// y (+)= the updates of `group`'s adapters on x, where the block has some.
Status AdapterForward(const BlockContext& ctx, const BlockWeights& w, const BlockActivations& a,
                      LoraGroup group, Tensor x, Tensor y,
                      GradientWrite y_write = GradientWrite::kAccumulate) {
  if (!w.lora[group].present()) return Status::Ok();
  return LoraForward(LoraOfLayer(ctx), w.lora[group], x, a.lora_u[group], y, y_write);
}

// y = x weight^T (+ bias) of a linear whose output `group`'s adapters update: where they cover
// all of y they write it first and the base GEMM adds onto them (y is then written once by a
// skinny GEMM and read by the GEMM's epilogue, instead of read and written again after it).
Status AdaptedLinearForward(const BlockContext& ctx, const BlockWeights& w,
                            const BlockActivations& a, LoraGroup group, Tensor y, Tensor x,
                            Tensor weight, Tensor bias) {
  Backend* be = ctx.backend;
  if (!w.lora[group].covers_output()) {
    TRAINER_RETURN_IF_ERROR(be->MatmulForward(y, Tensor(), x, weight, bias, Activation::kNone));
    return AdapterForward(ctx, w, a, group, x, y);
  }
  TRAINER_RETURN_IF_ERROR(AdapterForward(ctx, w, a, group, x, y, GradientWrite::kOverwrite));
  return be->MatmulColumns(Columns(y), GradientWrite::kAccumulate, Columns(x), weight, bias);
}

// din = dout @ weight for a linear with `group`'s adapters (dout: the gradient of its output),
// and the adapters' gradients; dweight, dbias as MatmulBackward. A frozen base (LoRA: dweight and
// dbias empty) lets the adapters write din first and its GEMM add onto it.
Status AdaptedLinearBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                             const BlockActivations& a, LoraGroup group, Tensor din,
                             Tensor dweight, Tensor dbias, Tensor dout, Tensor x, Tensor weight) {
  Backend* be = ctx.backend;
  const bool adapted = w.lora[group].present();
  const LoraContext lora = LoraOfLayer(ctx);
  if (adapted && dweight.empty() && dbias.empty()) {
    TRAINER_RETURN_IF_ERROR(LoraBackward(lora, w.lora[group], g.lora[group], x, a.lora_u[group],
                                         dout, din, GradientWrite::kOverwrite));
    return be->MatmulBackwardColumns(Columns(din), GradientWrite::kAccumulate, Tensor(),
                                     Columns(dout), Columns(x), weight);
  }
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(din, dweight, dbias, dout, x, weight, ctx.weight_gradients));
  if (!adapted) return Status::Ok();
  return LoraBackward(lora, w.lora[group], g.lora[group], x, a.lora_u[group], dout, din,
                      GradientWrite::kAccumulate);
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

DropoutKey HiddenDropoutKey(const BlockContext& ctx, uint32_t kind, int layer, bool row_block,
                            Tensor rows) {
  DropoutKey k = ctx.hidden_dropout;
  k.kind = kind;
  k.layer = layer;
  k.first_row = row_block && SequenceParallel(ctx) ? ctx.tp->rank() * Rows(rows) : 0;
  return k;
}

// LayerNorm without a bias (Model.bias: false) runs with a constant zero one.
Status NormForward(const BlockContext& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor in,
                   Tensor weight, Tensor bias) {
  if (ctx.spec->norm == NormKind::kRmsNorm)
    return ctx.backend->RmsNormForward(out, rstd, in, weight, ctx.spec->norm_eps);
  return ctx.backend->LayerNormForward(out, mean, rstd, in, weight,
                                       bias.empty() ? ctx.zero_bias : bias);
}

Status AddNormForward(const BlockContext& ctx, Tensor residual, Tensor out, Tensor mean,
                      Tensor rstd, Tensor a, Tensor b, Tensor weight, Tensor bias) {
  if (ctx.spec->norm == NormKind::kRmsNorm)
    return ctx.backend->AddRmsNormForward(residual, out, rstd, a, b, weight, ctx.spec->norm_eps);
  return ctx.backend->AddLayerNormForward(residual, out, mean, rstd, a, b, weight,
                                          bias.empty() ? ctx.zero_bias : bias);
}

Status NormBackward(const BlockContext& ctx, Tensor din, Tensor dweight, Tensor dbias,
                    Tensor din_sums, Tensor dout, Tensor in, Tensor weight, Tensor mean,
                    Tensor rstd) {
  if (ctx.spec->norm == NormKind::kLayerNorm)
    return ctx.backend->LayerNormBackward(din, dweight, dbias.empty() ? ctx.dbias_sink : dbias,
                                          din_sums, dout, in, weight, mean, rstd);
  // RMSNorm has no fused column sums: din's, as it is on entry, first.
  if (!din_sums.empty())
    TRAINER_RETURN_IF_ERROR(ctx.backend->ColumnSums(din_sums, din, 0, Tensor()));
  return ctx.backend->RmsNormBackward(din, dweight, dout, in, weight, rstd);
}

namespace {

// The q (kv: k) heads the q/k norm normalises apart: each head, or with qk_norm_full (OLMoE) all
// of them as one head of NH*HD (NKV = NH there).
int QkNormHeads(const BlockContext& ctx, bool kv) {
  return ctx.spec->qk_norm_full ? 1 : kv ? ctx.local_kv_heads : ctx.local_heads;
}

// The attention half's input side: qkv = ln1_out W^T (+ b), then the q/k norm and RoPE in place.
Status QkvForward(const BlockContext& ctx, const BlockWeights& w, BlockActivations* a) {
  Backend* be = ctx.backend;
  const bool qk_norm = !w.q_norm.empty();
  const Tensor out = qk_norm ? a->qkv_pre : a->qkv;
  TRAINER_RETURN_IF_ERROR(
      AdaptedLinearForward(ctx, w, *a, kLoraQkv, out, a->ln1_out, w.attn_w, w.attn_b));
  if (qk_norm)
    TRAINER_RETURN_IF_ERROR(be->QkNormForward(a->qkv, a->qkv_rstd, a->qkv_pre, w.q_norm, w.k_norm,
                                              QkNormHeads(ctx, false), QkNormHeads(ctx, true),
                                              ctx.spec->norm_eps));
  if (ctx.rope.empty()) return Status::Ok();
  return be->RopeForward(a->qkv, ctx.rope, ctx.local_heads, ctx.local_kv_heads, ctx.doc_starts);
}

// A dense MLP's a.fc_out from a.fc_pre (GELU or SwiGLU): in the forward, and again in backward
// where the layers share fc_out and SwiGLU's gradient pass does not make it (MlpBackward).
Status MlpActivationForward(const BlockContext& ctx, const BlockActivations& a) {
  if (ctx.spec->mlp == MlpKind::kGelu) return ctx.backend->GeluForward(a.fc_out, a.fc_pre);
  return ctx.backend->SwiGluForward(a.fc_out, a.fc_pre);
}

// The MLP's activation: GELU (fc_out, with fc_pre from the GEMM's epilogue) or SwiGLU.
Status MlpInputForward(const BlockContext& ctx, const BlockWeights& w, BlockActivations* a) {
  Backend* be = ctx.backend;
  if (ctx.spec->mlp == MlpKind::kGelu && !w.lora[kLoraMlpIn].present())
    return be->MatmulForward(a->fc_out, a->fc_pre, a->ln2_out, w.fc_w, w.fc_b, Activation::kGelu);
  TRAINER_RETURN_IF_ERROR(
      AdaptedLinearForward(ctx, w, *a, kLoraMlpIn, a->fc_pre, a->ln2_out, w.fc_w, w.fc_b));
  return MlpActivationForward(ctx, *a);
}

}  // namespace

Status BlockForward(const BlockContext& ctx, const BlockWeights& w, Tensor x, BlockActivations* a) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  // Without TP, each residual add rides the output projection's GEMM; with TP, the projection's
  // partial sums are reduced over the group first.
  const bool tp = Parallel(ctx), drop = ctx.hidden_dropout.on();
  Tensor summed;
  // Attention half.
  Tensor ln = RowBlockTarget(ctx, a->ln1_out);
  TRAINER_RETURN_IF_ERROR(NormForward(ctx, ln, a->ln1_mean, a->ln1_rstd, x, w.ln1_w, w.ln1_b));
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, ln, a->ln1_out));
  TRAINER_RETURN_IF_ERROR(QkvForward(ctx, w, a));
  TRAINER_RETURN_IF_ERROR(be->AttentionForward(a->att_out, a->att_stats, a->qkv, ctx.local_heads,
                                               ctx.local_kv_heads, AttentionDropoutKey(ctx),
                                               ctx.doc_starts, ctx.documents));
  ln = RowBlockTarget(ctx, a->ln2_out);
  if (tp || drop) {
    TRAINER_RETURN_IF_ERROR(be->MatmulForward(s.proj, Tensor(), a->att_out, w.proj_w,
                                              RowParallelBias(ctx, w.proj_b), Activation::kNone));
    TRAINER_RETURN_IF_ERROR(AdapterForward(ctx, w, *a, kLoraAttnOut, a->att_out, s.proj));
    TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.proj, &summed));
    if (drop)
      TRAINER_RETURN_IF_ERROR(be->Dropout(
          summed, summed, Tensor(),
          HiddenDropoutKey(ctx, kDropoutAttnOut, ctx.layer, /*row_block=*/true, summed)));
    TRAINER_RETURN_IF_ERROR(AddNormForward(ctx, a->residual_mid, ln, a->ln2_mean, a->ln2_rstd, x,
                                           summed, w.ln2_w, w.ln2_b));
  } else {
    TRAINER_RETURN_IF_ERROR(
        be->MatmulForwardAddResidual(a->residual_mid, a->att_out, w.proj_w, w.proj_b, x));
    TRAINER_RETURN_IF_ERROR(AdapterForward(ctx, w, *a, kLoraAttnOut, a->att_out, a->residual_mid));
    TRAINER_RETURN_IF_ERROR(
        NormForward(ctx, ln, a->ln2_mean, a->ln2_rstd, a->residual_mid, w.ln2_w, w.ln2_b));
  }
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, ln, a->ln2_out));
  if (!w.moe.router.empty()) {  // whole on every TP rank: no reduction
    TRAINER_RETURN_IF_ERROR(MoeForward(MoeCtx(ctx), w.moe, a->ln2_out, a->moe));
    const Tensor out = OwnRows(ctx, a->moe.out);
    if (!drop) return be->Add(a->residual_out, a->residual_mid, out);
    return be->Dropout(a->residual_out, out, a->residual_mid,
                       HiddenDropoutKey(ctx, kDropoutMlpOut, ctx.layer, /*row_block=*/true, out));
  }
  // MLP half.
  TRAINER_RETURN_IF_ERROR(MlpInputForward(ctx, w, a));
  if (!tp && !drop) {
    TRAINER_RETURN_IF_ERROR(be->MatmulForwardAddResidual(a->residual_out, a->fc_out, w.fcproj_w,
                                                         w.fcproj_b, a->residual_mid));
    return AdapterForward(ctx, w, *a, kLoraMlpOut, a->fc_out, a->residual_out);
  }
  TRAINER_RETURN_IF_ERROR(be->MatmulForward(s.proj, Tensor(), a->fc_out, w.fcproj_w,
                                            RowParallelBias(ctx, w.fcproj_b), Activation::kNone));
  TRAINER_RETURN_IF_ERROR(AdapterForward(ctx, w, *a, kLoraMlpOut, a->fc_out, s.proj));
  TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.proj, &summed));
  if (!drop) return be->Add(a->residual_out, a->residual_mid, summed);
  return be->Dropout(a->residual_out, summed, a->residual_mid,
                     HiddenDropoutKey(ctx, kDropoutMlpOut, ctx.layer, /*row_block=*/true, summed));
}

// GPT-2's k and v thirds of the qkv bias gradient without a pass over dqkv. Softmax ignores a
// constant added to a row of scores, and a k bias adds q_i . b_k to every score of row i: the
// k bias gradient is zero. A v bias adds b_v to every attention output row (each row of the
// attention weights sums to one), so its gradient is the column sum of the attention output's
// gradient, sum_i dO_i = (sum_i dY_i) W_proj: the projection's bias gradient (already summed,
// over every micro-batch so far) times W_proj, a (C) x (C, C/tp) product written afresh after
// each micro-batch. The k third keeps the zero that ZeroGradients wrote. (With RoPE or a q/k
// norm between, without the projection's bias, or with attention dropout, whose rows of weights
// do not sum to one, the whole of dqkv is summed instead.)
namespace {
bool QkvBiasShortcut(const BlockContext& ctx, const BlockWeights& w) {
  return ctx.rope.empty() && w.q_norm.empty() && !w.proj_b.empty() &&
         ctx.local_heads == ctx.local_kv_heads && !ctx.attention_dropout.on();
}

Status AttentionBiasGradients(const BlockContext& ctx, const BlockWeights& w,
                              const BlockWeights& g) {
  Backend* be = ctx.backend;
  const int64_t local_c = g.attn_b.numel() / 3;
  const Tensor v_bias = g.attn_b.rows(2 * local_c, local_c);
  TRAINER_RETURN_IF_ERROR(be->Zero(v_bias));
  return be->ColumnSums(v_bias, w.proj_w, 0, g.proj_b);
}

// The MLP half's backward down to d(ln2_out) in s.dln (partial over TP).
Status MlpBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                   const BlockActivations& a, Tensor dres_all, Tensor fcproj_db) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  const GradientWrite dw = ctx.weight_gradients;
  const bool gelu = ctx.spec->mlp == MlpKind::kGelu;
  // The activation's output made again (shared by the layers): by SwiGLU's gradient pass where
  // the down projection's weight gradient can wait for it, else first.
  const bool remake = ctx.mlp_act_source == SwiGluAct::kRemake;
  const bool swiglu_remakes = remake && !gelu && !w.lora[kLoraMlpOut].present();
  if (remake && !swiglu_remakes) TRAINER_RETURN_IF_ERROR(MlpActivationForward(ctx, a));
  if (swiglu_remakes) {  // d(act), then dfc with act, then the down projection's dW from act
    TRAINER_RETURN_IF_ERROR(
        be->MatmulBackward(s.dact, Tensor(), Tensor(), dres_all, a.fc_out, w.fcproj_w, dw));
    TRAINER_RETURN_IF_ERROR(be->SwiGluBackward(s.dfc, s.dact, a.fc_pre, a.fc_out));
    if (!g.fcproj_w.empty() || !fcproj_db.empty())
      TRAINER_RETURN_IF_ERROR(
          be->MatmulBackward(Tensor(), g.fcproj_w, fcproj_db, dres_all, a.fc_out, w.fcproj_w, dw));
    if (!g.fc_b.empty()) TRAINER_RETURN_IF_ERROR(be->ColumnSums(g.fc_b, s.dfc, 0, Tensor()));
  } else if (gelu && !w.lora[kLoraMlpOut].present()) {
    // fc's bias gradient is the column sums of dfc, summed as dfc is made.
    TRAINER_RETURN_IF_ERROR(be->MatmulBackwardThroughGelu(
        s.dfc, g.fcproj_w, fcproj_db, dres_all, a.fc_out, w.fcproj_w, a.fc_pre, g.fc_b, dw));
  } else {
    const Tensor dact = gelu ? s.dfc : s.dact;  // the gradient of the activation's output
    TRAINER_RETURN_IF_ERROR(AdaptedLinearBackward(ctx, w, g, a, kLoraMlpOut, dact, g.fcproj_w,
                                                  fcproj_db, dres_all, a.fc_out, w.fcproj_w));
    if (gelu)
      TRAINER_RETURN_IF_ERROR(be->GeluBackward(s.dfc, s.dfc, a.fc_pre));
    else
      TRAINER_RETURN_IF_ERROR(be->SwiGluBackward(s.dfc, s.dact, a.fc_pre));
    if (!g.fc_b.empty()) TRAINER_RETURN_IF_ERROR(be->ColumnSums(g.fc_b, s.dfc, 0, Tensor()));
  }
  return AdaptedLinearBackward(ctx, w, g, a, kLoraMlpIn, s.dln, g.fc_w, Tensor(), s.dfc, a.ln2_out,
                               w.fc_w);
}

// A norm's output again, as BlockForward made it (the statistics are written again, the same).
Status RecomputeNorm(const BlockContext& ctx, Tensor out, Tensor mean, Tensor rstd, Tensor in,
                     Tensor weight, Tensor bias) {
  const Tensor ln = RowBlockTarget(ctx, out);
  TRAINER_RETURN_IF_ERROR(NormForward(ctx, ln, mean, rstd, in, weight, bias));
  return GatherRows(ctx, ln, out);
}

// The attention half's backward from d(att_out) in s.datt down to d(ln1_out) in s.dln.
Status AttentionInputBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                              const BlockActivations& a) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  TRAINER_RETURN_IF_ERROR(be->AttentionBackward(s.dqkv, s.datt, a.qkv, a.att_out, a.att_stats,
                                                ctx.local_heads, ctx.local_kv_heads,
                                                AttentionDropoutKey(ctx), ctx.doc_starts,
                                                ctx.documents));
  if (!ctx.rope.empty())
    TRAINER_RETURN_IF_ERROR(
        be->RopeBackward(s.dqkv, ctx.rope, ctx.local_heads, ctx.local_kv_heads, ctx.doc_starts));
  if (!w.q_norm.empty())
    TRAINER_RETURN_IF_ERROR(be->QkNormBackward(s.dqkv, g.q_norm, g.k_norm, s.dqkv, a.qkv_pre,
                                               w.q_norm, w.k_norm, a.qkv_rstd,
                                               QkNormHeads(ctx, false), QkNormHeads(ctx, true)));
  TRAINER_RETURN_IF_ERROR(AdaptedLinearBackward(ctx, w, g, a, kLoraQkv, s.dln, g.attn_w, Tensor(),
                                                s.dqkv, a.ln1_out, w.attn_w));
  if (g.attn_b.empty()) return Status::Ok();
  if (!QkvBiasShortcut(ctx, w)) return be->ColumnSums(g.attn_b, s.dqkv, 0, Tensor());
  // The qkv bias gradient reads only the q third of dqkv (see AttentionBiasGradients).
  const int64_t local_c = g.attn_b.numel() / 3;
  return be->ColumnSums(g.attn_b.rows(0, local_c), s.dqkv, 0, Tensor());
}

}  // namespace

Status BlockBackward(const BlockContext& ctx, const BlockWeights& w, const BlockWeights& g,
                     Tensor x, const BlockActivations& a, Tensor dresidual) {
  Backend* be = ctx.backend;
  const BlockScratch& s = ctx.scratch;
  // The row-parallel linears need the gradient of every row; their bias gradient is then the
  // same on every TP rank, so the replicas of the bias stay equal.
  const Tensor dres_all = SequenceParallel(ctx) ? s.dres_all : dresidual;
  // With hidden dropout, the output projections see the residual gradient through its mask.
  const bool drop = ctx.hidden_dropout.on();
  const Tensor dproj = drop ? s.ddrop : dres_all;
  auto drop_gradient = [&](uint32_t kind) {
    return drop ? be->Dropout(s.ddrop, dres_all, Tensor(),
                              HiddenDropoutKey(ctx, kind, ctx.layer, /*row_block=*/false, dres_all))
                : Status::Ok();
  };
  // Without TP or dropout, the output projections' bias gradients are column sums of the residual
  // gradient, which the LayerNorm backward after each one reads anyway: it sums them there.
  const bool ln_sums = !Parallel(ctx) && !drop;
  const Tensor fcproj_db = ln_sums ? Tensor() : g.fcproj_b, proj_db = ln_sums ? Tensor() : g.proj_b;
  Tensor dln;
  // MLP half: residual_out = residual_mid + fcproj(act(fc(ln2(residual_mid)))).
  if (ctx.recompute_norms)
    TRAINER_RETURN_IF_ERROR(
        RecomputeNorm(ctx, a.ln2_out, a.ln2_mean, a.ln2_rstd, a.residual_mid, w.ln2_w, w.ln2_b));
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, dresidual, dres_all));
  TRAINER_RETURN_IF_ERROR(drop_gradient(kDropoutMlpOut));
  if (!w.moe.router.empty()) {  // d(ln2_out) is whole on every TP rank
    TRAINER_RETURN_IF_ERROR(MoeBackward(MoeCtx(ctx), w.moe, g.moe, a.ln2_out, a.moe, dproj, s.dln));
    dln = OwnRows(ctx, s.dln);
  } else {
    TRAINER_RETURN_IF_ERROR(MlpBackward(ctx, w, g, a, dproj, fcproj_db));
    TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.dln, &dln));
  }
  TRAINER_RETURN_IF_ERROR(NormBackward(ctx, dresidual, g.ln2_w, g.ln2_b,
                                       ln_sums ? g.fcproj_b : Tensor(), dln, a.residual_mid,
                                       w.ln2_w, a.ln2_mean, a.ln2_rstd));
  // Attention half: residual_mid = x + proj(attention(qkv(ln1(x)))).
  TRAINER_RETURN_IF_ERROR(GatherRows(ctx, dresidual, dres_all));
  TRAINER_RETURN_IF_ERROR(drop_gradient(kDropoutAttnOut));
  TRAINER_RETURN_IF_ERROR(AdaptedLinearBackward(ctx, w, g, a, kLoraAttnOut, s.datt, g.proj_w,
                                                proj_db, dproj, a.att_out, w.proj_w));
  if (ctx.recompute_norms)
    TRAINER_RETURN_IF_ERROR(
        RecomputeNorm(ctx, a.ln1_out, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b));
  TRAINER_RETURN_IF_ERROR(AttentionInputBackward(ctx, w, g, a));
  TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, s.dln, &dln));
  TRAINER_RETURN_IF_ERROR(NormBackward(ctx, dresidual, g.ln1_w, g.ln1_b,
                                       ln_sums ? g.proj_b : Tensor(), dln, x, w.ln1_w, a.ln1_mean,
                                       a.ln1_rstd));
  // Last: without TP, g.proj_b is complete only once ln1's backward has summed it (ln_sums).
  if (g.attn_b.empty() || !QkvBiasShortcut(ctx, w)) return Status::Ok();
  return AttentionBiasGradients(ctx, w, g);
}

}  // namespace trainer
