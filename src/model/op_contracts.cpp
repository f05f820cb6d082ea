// The contracts of Backend's layer, loss, elementwise and optimizer ops (backend.h), checked once
// for every backend: each public op checks its tensors here (op_contract.h), then calls the
// backend's Run* hook. The defaults of the fused hooks (Run*AddLayerNorm..., ...) are here too.
#include "model/backend.h"
#include "model/op_contract.h"

namespace trainer {

using contract::CheckDocStarts;
using contract::HeadSize;
using contract::HeadsText;
using contract::OpContract;

namespace {

constexpr DType kF32 = DType::kF32;

// ---- shared pieces of contracts ----

// Embedding, both directions: x is out (forward) or dout (backward), table is wte or dwte, pos
// is wpe or dwpe (may be empty).
Status CheckEmbedding(const Backend& be, const char* op, const char* x_name, const Tensor& x,
                      const char* table_name, const Tensor& table, DType table_dtype,
                      const char* pos_name, const Tensor& pos, const Tensor& tokens) {
  const int64_t T = tokens.ndim == 2 ? tokens.dim(1) : 0;
  OpContract c(be, op);
  c.Has(x_name, x, be.compute_dtype(), -1)
      .Has(table_name, table, table_dtype, -1)
      .Has("tokens", tokens, DType::kI32, -1)
      .Dims("tokens", tokens, 2)
      .Dims(table_name, table, 2)
      .Agree(x_name, x, table_name, table, "C", Cols(x), Cols(table))
      .Agree(x_name, x, "tokens", tokens, "B*T", Rows(x), tokens.numel());
  if (pos.empty()) return c.status();
  c.Has(pos_name, pos, table_dtype, -1)
      .Agree(pos_name, pos, table_name, table, "C", Cols(pos), Cols(table))
      .Require(Rows(pos) >= T,
               StrFormat("%s %s has fewer positions than tokens %s has steps", pos_name,
                         pos.shape_string().c_str(), tokens.shape_string().c_str()));
  return c.status();
}

// The (N) statistics and (C) parameters of LayerNorm around x (N,C).
void CheckLayerNormAround(OpContract& c, const char* x_name, const Tensor& x, const Tensor& mean,
                          const Tensor& rstd, const char* w_name, const Tensor& weight,
                          const char* b_name, const Tensor& bias, DType param_dtype) {
  c.PerRow("mean", mean, kF32, 1, x_name, x)
      .PerRow("rstd", rstd, kF32, 1, x_name, x)
      .PerColumn(w_name, weight, param_dtype, x_name, x)
      .PerColumn(b_name, bias, param_dtype, x_name, x);
}

// A linear layer: in (N,C), weight (OC,C), out_name (N,OC) (the forward's out or the backward's
// dout), all compute; out_name of out_dtype where the op allows f32 there (the MoE router).
void CheckLinear(OpContract& c, DType cd, const char* out_name, const Tensor& out, const Tensor& in,
                 const Tensor& weight, DType out_dtype) {
  const int64_t OC = weight.ndim == 2 ? weight.dim(0) : 0;
  const int64_t WC = weight.ndim == 2 ? weight.dim(1) : 0;
  c.Has(out_name, out, out_dtype, -1)
      .Has("in", in, cd, -1)
      .Has("weight", weight, cd, -1)
      .Dims("weight", weight, 2)
      .Agree("in", in, "weight", weight, "C", Cols(in), WC)
      .Agree(out_name, out, "weight", weight, "OC", Cols(out), OC)
      .Agree(out_name, out, "in", in, "N", Rows(out), Rows(in));
}

// The dtype a plain linear's out (or dout) must have: compute, or f32 where it is f32 and the op
// has no bias and no activation (the MoE router's f32 logits, backend.h).
DType LinearOutDType(DType cd, const Tensor& out, bool plain) {
  return plain && out.dtype == kF32 ? kF32 : cd;
}

// MatmulBackward's tensors (those of MatmulBackwardThroughGelu but gelu_pre_act and din_sums).
void CheckLinearBackward(OpContract& c, DType cd, const Tensor& din, const Tensor& dweight,
                         const Tensor& dbias, const Tensor& dout, const Tensor& in,
                         const Tensor& weight, DType dout_dtype) {
  CheckLinear(c, cd, "dout", dout, in, weight, dout_dtype);
  c.Optional(din)
      .Like("din", din, cd, "in", in)
      .Optional(dweight)
      .Like("dweight", dweight, kF32, "weight", weight)
      .Optional(dbias)
      .PerRow("dbias", dbias, kF32, 1, "weight", weight);
}

// Attention: qkv (B,T,(NH+2*NKV)*HS) against x (B,T,NH*HS) (out or dout) and stats (B,NH,T).
void CheckAttention(OpContract& c, DType cd, const Tensor& qkv, const char* x_name, const Tensor& x,
                    const Tensor& stats, int num_heads, int num_kv_heads) {
  const int64_t HS = HeadSize(qkv, num_heads, num_kv_heads);
  const int64_t BT = qkv.ndim == 3 ? qkv.dim(0) * qkv.dim(1) : 0;
  c.Has("qkv", qkv, cd, -1)
      .Dims("qkv", qkv, 3)
      .Require(HS > 0, HeadsText(qkv, num_heads, num_kv_heads))
      .Has(x_name, x, cd, -1)
      .Agree(x_name, x, "qkv", qkv, "NH*HS", Cols(x), num_heads * HS)
      .Agree(x_name, x, "qkv", qkv, "B*T", Rows(x), Rows(qkv))
      .Has("stats", stats, kF32, BT * num_heads);
}

// Cross-entropy: logits (N,Vlocal) compute and the vocabulary range.
void CheckLogits(OpContract& c, DType cd, const Tensor& logits, int vocab_start, int vocab_size) {
  c.Has("logits", logits, cd, -1)
      .Require(vocab_start >= 0 && vocab_size > 0,
               StrFormat("vocab_start %d / vocab_size %d out of range", vocab_start, vocab_size));
}

}  // namespace

// ---- copies, elementwise ----

Status Backend::Convert(Tensor dst, Tensor src) {
  OpContract c(*this, "Convert");
  c.F32OrBf16("src", src)
      .F32OrBf16("dst", dst)
      .Agree("dst", dst, "src", src, "the number of elements", dst.numel(), src.numel());
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunConvert(dst, src);
}

Status Backend::Add(Tensor out, Tensor a, Tensor b) {
  OpContract c(*this, "Add");
  c.Float("out", out).Like("a", a, out.dtype, "out", out).Like("b", b, out.dtype, "out", out);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunAdd(out, a, b);
}

Status Backend::AddInPlace(Tensor out, Tensor a) {
  OpContract c(*this, "AddInPlace");
  c.Float("out", out).Like("a", a, out.dtype, "out", out);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunAddInPlace(out, a);
}

Status Backend::Scale(Tensor x, float s) {
  if (x.empty()) return Status::Ok();
  OpContract c(*this, "Scale");
  c.F32OrBf16("x", x);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunScale(x, s);
}

// ---- embedding ----

Status Backend::EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                                 int vocab_start) {
  TRAINER_RETURN_IF_ERROR(CheckEmbedding(*this, "EmbeddingForward", "out", out, "wte", wte,
                                         compute_dtype(), "wpe", wpe, tokens));
  return RunEmbeddingForward(out, tokens, wte, wpe, vocab_start);
}

Status Backend::EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                  int vocab_start) {
  TRAINER_RETURN_IF_ERROR(CheckEmbedding(*this, "EmbeddingBackward", "dout", dout, "dwte", dwte,
                                         kF32, "dwpe", dwpe, tokens));
  return RunEmbeddingBackward(dwte, dwpe, dout, tokens, vocab_start);
}

// ---- layer norm ----

Status Backend::LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight,
                                 Tensor bias) {
  const DType cd = compute_dtype();
  OpContract c(*this, "LayerNormForward");
  c.Has("in", in, cd, -1);
  CheckLayerNormAround(c, "in", in, mean, rstd, "weight", weight, "bias", bias, cd);
  c.Like("out", out, cd, "in", in);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunLayerNormForward(out, mean, rstd, in, weight, bias);
}

Status Backend::LayerNormBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor din_sums,
                                  Tensor dout, Tensor in, Tensor weight, Tensor mean, Tensor rstd) {
  const DType cd = compute_dtype();
  OpContract c(*this, "LayerNormBackward");
  c.Has("in", in, cd, -1);
  CheckLayerNormAround(c, "in", in, mean, rstd, "dweight", dweight, "dbias", dbias, kF32);
  c.PerColumn("weight", weight, cd, "in", in)
      .Like("din", din, cd, "in", in)
      .Like("dout", dout, cd, "in", in)
      .Optional(din_sums)
      .PerColumn("din_sums", din_sums, kF32, "in", in);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunLayerNormBackward(din, dweight, dbias, din_sums, dout, in, weight, mean, rstd);
}

Status Backend::AddLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                    Tensor b, Tensor weight, Tensor bias) {
  const DType cd = compute_dtype();
  OpContract c(*this, "AddLayerNormForward");
  c.Has("a", a, cd, -1).Like("b", b, cd, "a", a).Like("residual", residual, cd, "a", a);
  CheckLayerNormAround(c, "a", a, mean, rstd, "weight", weight, "bias", bias, cd);
  c.Like("out", out, cd, "a", a);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunAddLayerNormForward(residual, out, mean, rstd, a, b, weight, bias);
}

Status Backend::RunAddLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd,
                                       Tensor a, Tensor b, Tensor weight, Tensor bias) {
  TRAINER_RETURN_IF_ERROR(RunAdd(residual, a, b));
  return RunLayerNormForward(out, mean, rstd, residual, weight, bias);
}

// ---- matmul ----

Status Backend::MatmulForward(Tensor out, Tensor pre_act, Tensor in, Tensor weight, Tensor bias,
                              Activation act) {
  const DType cd = compute_dtype();
  OpContract c(*this, "MatmulForward");
  CheckLinear(c, cd, "out", out, in, weight,
              LinearOutDType(cd, out, bias.empty() && act == Activation::kNone));
  c.Optional(bias).PerRow("bias", bias, cd, 1, "weight", weight);
  if (act == Activation::kGelu) c.Like("pre_act", pre_act, cd, "out", out);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMatmulForward(out, pre_act, in, weight, bias, act);
}

Status Backend::MatmulForwardAddResidual(Tensor out, Tensor in, Tensor weight, Tensor bias,
                                         Tensor residual) {
  const DType cd = compute_dtype();
  OpContract c(*this, "MatmulForwardAddResidual");
  CheckLinear(c, cd, "out", out, in, weight, cd);
  c.Like("residual", residual, cd, "out", out)
      .Optional(bias)
      .PerRow("bias", bias, cd, 1, "weight", weight)
      .Require(out.data != in.data && out.data != residual.data,
               "out must not alias in or residual");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMatmulForwardAddResidual(out, in, weight, bias, residual);
}

Status Backend::RunMatmulForwardAddResidual(Tensor out, Tensor in, Tensor weight, Tensor bias,
                                            Tensor residual) {
  TRAINER_RETURN_IF_ERROR(RunMatmulForward(out, Tensor(), in, weight, bias, Activation::kNone));
  return RunAdd(out, out, residual);
}

Status Backend::MatmulBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                               Tensor weight, GradientWrite dweight_write) {
  OpContract c(*this, "MatmulBackward");
  CheckLinearBackward(c, compute_dtype(), din, dweight, dbias, dout, in, weight,
                      LinearOutDType(compute_dtype(), dout, dbias.empty()));
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMatmulBackward(din, dweight, dbias, dout, in, weight, dweight_write);
}

Status Backend::MatmulBackwardThroughGelu(Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                                          Tensor in, Tensor weight, Tensor gelu_pre_act,
                                          Tensor din_sums, GradientWrite dweight_write) {
  const DType cd = compute_dtype();
  OpContract c(*this, "MatmulBackwardThroughGelu");
  c.Has("din", din, cd, -1);
  CheckLinearBackward(c, cd, din, dweight, dbias, dout, in, weight, cd);
  c.Like("gelu_pre_act", gelu_pre_act, cd, "in", in)
      .Optional(din_sums)
      .PerColumn("din_sums", din_sums, kF32, "in", in);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMatmulBackwardThroughGelu(din, dweight, dbias, dout, in, weight, gelu_pre_act, din_sums,
                                      dweight_write);
}

Status Backend::RunMatmulBackwardThroughGelu(Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                                             Tensor in, Tensor weight, Tensor gelu_pre_act,
                                             Tensor din_sums, GradientWrite dweight_write) {
  TRAINER_RETURN_IF_ERROR(RunMatmulBackward(din, dweight, dbias, dout, in, weight, dweight_write));
  TRAINER_RETURN_IF_ERROR(RunGeluBackward(din, din, gelu_pre_act));
  return din_sums.empty() ? Status::Ok() : RunColumnSums(din_sums, din, 0, Tensor());
}

Status Backend::ColumnSums(Tensor out, Tensor in, int64_t first_column, Tensor row_weights) {
  const int64_t C = Cols(in), W = out.numel();
  OpContract c(*this, "ColumnSums");
  c.Has("in", in, compute_dtype(), -1)
      .Has("out", out, kF32, -1)
      .Require(first_column >= 0 && first_column + W <= C,
               StrFormat("columns [%lld, %lld) (out %s) outside in %s", (long long)first_column,
                         (long long)(first_column + W), out.shape_string().c_str(),
                         in.shape_string().c_str()))
      .Optional(row_weights)
      .PerRow("row_weights", row_weights, kF32, 1, "in", in);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunColumnSums(out, in, first_column, row_weights);
}

namespace {
// A block of `cols` columns of a compute-dtype matrix with `rows` rows: inside it.
void CheckBlock(OpContract& c, DType cd, const char* name, const ColumnBlock& b, int64_t rows,
                int64_t cols) {
  c.Has(name, b.whole, cd, -1)
      .Require(b.rows() == rows,
               StrFormat("%s %s has %lld rows, expected %lld", name,
                         b.whole.shape_string().c_str(), (long long)b.rows(), (long long)rows))
      .Require(b.cols == cols && b.first >= 0 && b.first + b.cols <= b.ld(),
               StrFormat("columns [%lld, %lld) of %s %s: expected a block of %lld inside it",
                         (long long)b.first, (long long)(b.first + b.cols), name,
                         b.whole.shape_string().c_str(), (long long)cols));
}
}  // namespace

Status Backend::MatmulColumns(ColumnBlock out, GradientWrite out_write, ColumnBlock in,
                              Tensor weight, Tensor bias, float alpha) {
  const DType cd = compute_dtype();
  OpContract c(*this, "MatmulColumns");
  c.Has("weight", weight, cd, -1).Dims("weight", weight, 2);
  if (c.status().ok()) {
    CheckBlock(c, cd, "in", in, in.rows(), weight.dim(1));
    CheckBlock(c, cd, "out", out, in.rows(), weight.dim(0));
  }
  c.Optional(bias)
      .PerRow("bias", bias, cd, 1, "weight", weight)
      .Require(out.whole.data != in.whole.data, "out must not alias in");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMatmulColumns(out, out_write, in, weight, bias, alpha);
}

Status Backend::MatmulBackwardColumns(ColumnBlock din, GradientWrite din_write, Tensor dweight,
                                      ColumnBlock dout, ColumnBlock in, Tensor weight,
                                      float alpha) {
  const DType cd = compute_dtype();
  OpContract c(*this, "MatmulBackwardColumns");
  c.Has("weight", weight, cd, -1).Dims("weight", weight, 2);
  if (c.status().ok()) {
    CheckBlock(c, cd, "dout", dout, dout.rows(), weight.dim(0));
    CheckBlock(c, cd, "in", in, dout.rows(), weight.dim(1));
    if (!din.whole.empty()) CheckBlock(c, cd, "din", din, dout.rows(), weight.dim(1));
  }
  c.Optional(dweight)
      .Like("dweight", dweight, kF32, "weight", weight)
      .Require(din.whole.empty() || (din.whole.data != dout.whole.data &&
                                     din.whole.data != in.whole.data),
               "din must not alias dout or in");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMatmulBackwardColumns(din, din_write, dweight, dout, in, weight, alpha);
}

// ---- GELU ----

Status Backend::GeluForward(Tensor out, Tensor in) {
  const DType cd = compute_dtype();
  OpContract c(*this, "GeluForward");
  c.Has("in", in, cd, -1).Like("out", out, cd, "in", in);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunGeluForward(out, in);
}

Status Backend::GeluBackward(Tensor dx, Tensor dy, Tensor pre_act) {
  const DType cd = compute_dtype();
  OpContract c(*this, "GeluBackward");
  c.Has("pre_act", pre_act, cd, -1)
      .Like("dy", dy, cd, "pre_act", pre_act)
      .Like("dx", dx, cd, "pre_act", pre_act);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunGeluBackward(dx, dy, pre_act);
}

// ---- attention ----

namespace {
// A dropout key's probability and sequence length.
void CheckDropoutKey(OpContract& c, const DropoutKey& key) {
  c.Require(key.p >= 0.f && key.p < 1.f, StrFormat("dropout probability %g is outside [0, 1)",
                                                   static_cast<double>(key.p)))
      .Require(key.seq_len > 0, "dropout key without a sequence length")
      .Require(key.first_column >= 0, "dropout key with a negative first column");
}
// The host's measure of the documents (unknown, or with doc_starts and within the batch).
void CheckDocumentShape(OpContract& c, const DocumentShape& d, const Tensor& doc_starts,
                        const Tensor& qkv) {
  if (!d.known()) return;
  const int64_t B = qkv.ndim == 3 ? qkv.dim(0) : 0, T = qkv.ndim == 3 ? qkv.dim(1) : 0;
  c.Require(!doc_starts.empty(), "documents measured without doc_starts")
      .Require(d.count >= B && d.count <= B * T && d.longest >= 1 && d.longest <= T,
               StrFormat("documents count %d, longest %d do not fit B=%lld T=%lld", d.count,
                         d.longest, static_cast<long long>(B), static_cast<long long>(T)));
}
}  // namespace

Status Backend::AttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                                 int num_kv_heads, const DropoutKey& dropout, Tensor doc_starts,
                                 DocumentShape documents) {
  const int NKV = num_kv_heads == 0 ? num_heads : num_kv_heads;
  OpContract c(*this, "AttentionForward");
  CheckAttention(c, compute_dtype(), qkv, "out", out, stats, num_heads, NKV);
  CheckDocStarts(c, doc_starts, qkv);
  CheckDocumentShape(c, documents, doc_starts, qkv);
  CheckDropoutKey(c, dropout);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunAttentionForward(out, stats, qkv, num_heads, NKV, dropout, doc_starts, documents);
}

Status Backend::AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                                  int num_heads, int num_kv_heads, const DropoutKey& dropout,
                                  Tensor doc_starts, DocumentShape documents) {
  const DType cd = compute_dtype();
  const int NKV = num_kv_heads == 0 ? num_heads : num_kv_heads;
  OpContract c(*this, "AttentionBackward");
  CheckAttention(c, cd, qkv, "dout", dout, stats, num_heads, NKV);
  c.Like("out", out, cd, "dout", dout).Like("dqkv", dqkv, cd, "qkv", qkv);
  CheckDocStarts(c, doc_starts, qkv);
  CheckDocumentShape(c, documents, doc_starts, qkv);
  CheckDropoutKey(c, dropout);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunAttentionBackward(dqkv, dout, qkv, out, stats, num_heads, NKV, dropout, doc_starts,
                              documents);
}

Status Backend::Dropout(Tensor out, Tensor in, Tensor residual, const DropoutKey& key) {
  const DType cd = compute_dtype();
  OpContract c(*this, "Dropout");
  c.Has("in", in, cd, -1).Like("out", out, cd, "in", in).Optional(residual).Like(
      "residual", residual, cd, "in", in);
  CheckDropoutKey(c, key);
  c.Require(key.on(), "Dropout with probability 0 (the caller skips it)");
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunDropout(out, in, residual, key);
}

// ---- cross-entropy ----

Status Backend::CrossEntropyRowMax(Tensor row_max, Tensor logits, int vocab_start, int vocab_size) {
  OpContract c(*this, "CrossEntropyRowMax");
  CheckLogits(c, compute_dtype(), logits, vocab_start, vocab_size);
  c.PerRow("row_max", row_max, kF32, 1, "logits", logits);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunCrossEntropyRowMax(row_max, logits, vocab_start, vocab_size);
}

Status Backend::CrossEntropySums(Tensor sums, Tensor logits, Tensor row_max, Tensor targets,
                                 int vocab_start, int vocab_size) {
  OpContract c(*this, "CrossEntropySums");
  CheckLogits(c, compute_dtype(), logits, vocab_start, vocab_size);
  c.PerRow("sums", sums, kF32, 2, "logits", logits)
      .PerRow("row_max", row_max, kF32, 1, "logits", logits)
      .PerRow("targets", targets, DType::kI32, 1, "logits", logits);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunCrossEntropySums(sums, logits, row_max, targets, vocab_start, vocab_size);
}

namespace {
// CrossEntropyBackward's and CrossEntropyFused's tensors.
void CheckLossOutputs(OpContract& c, DType cd, const Tensor& losses, const Tensor& dlogits,
                      const Tensor& logits, const Tensor& row_max, const Tensor& sums,
                      const Tensor& targets) {
  c.PerRow("losses", losses, kF32, 1, "logits", logits)
      .PerRow("row_max", row_max, kF32, 1, "logits", logits)
      .PerRow("sums", sums, kF32, 2, "logits", logits)
      .PerRow("targets", targets, DType::kI32, 1, "logits", logits)
      .Optional(dlogits)
      .Like("dlogits", dlogits, cd, "logits", logits);
}
}  // namespace

Status Backend::CrossEntropyBackward(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                                     Tensor sums, Tensor targets, int vocab_start, int vocab_size,
                                     float dloss_scale) {
  const DType cd = compute_dtype();
  OpContract c(*this, "CrossEntropyBackward");
  CheckLogits(c, cd, logits, vocab_start, vocab_size);
  CheckLossOutputs(c, cd, losses, dlogits, logits, row_max, sums, targets);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunCrossEntropyBackward(losses, dlogits, logits, row_max, sums, targets, vocab_start,
                                 vocab_size, dloss_scale);
}

Status Backend::CrossEntropyFused(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                                  Tensor sums, Tensor targets, int vocab_size, float dloss_scale) {
  const DType cd = compute_dtype();
  OpContract c(*this, "CrossEntropyFused");
  CheckLogits(c, cd, logits, 0, vocab_size);
  CheckLossOutputs(c, cd, losses, dlogits, logits, row_max, sums, targets);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunCrossEntropyFused(losses, dlogits, logits, row_max, sums, targets, vocab_size,
                              dloss_scale);
}

Status Backend::RunCrossEntropyFused(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                                     Tensor sums, Tensor targets, int vocab_size,
                                     float dloss_scale) {
  TRAINER_RETURN_IF_ERROR(RunCrossEntropyRowMax(row_max, logits, 0, vocab_size));
  TRAINER_RETURN_IF_ERROR(RunCrossEntropySums(sums, logits, row_max, targets, 0, vocab_size));
  return RunCrossEntropyBackward(losses, dlogits, logits, row_max, sums, targets, 0, vocab_size,
                                 dloss_scale);
}

// ---- optimizer ----

Status Backend::AdamW(Tensor param, Tensor master, Tensor grad, Tensor m, Tensor v,
                      const AdamWParams& p) {
  OpContract c(*this, "AdamW");
  const bool halves = master.dtype == DType::kU16;
  c.Has("master", master, halves ? DType::kU16 : kF32, -1)
      .SameCount("grad", grad, kF32, "master", master)
      .SameCount("m", m, kF32, "master", master)
      .SameCount("v", v, kF32, "master", master)
      .Require(p.step >= 1, StrFormat("step %d is not 1-based", p.step));
  if (halves)  // the remainders of bf16 parameters, on every backend
    c.SameCount("param", param, DType::kBF16, "master", master);
  else
    c.Float("param", param).SameCount("param", param, param.dtype, "master", master);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunAdamW(param, master, grad, m, v, p);
}

namespace {

Status CheckMasterHalves(Backend& be, const char* op, Tensor master, Tensor param,
                         Tensor remainder) {
  OpContract c(be, op);
  c.Has("master", master, kF32, -1)
      .SameCount("param", param, DType::kBF16, "master", master)
      .SameCount("remainder", remainder, DType::kU16, "master", master);
  return c.status();
}

}  // namespace

Status Backend::JoinMasterHalves(Tensor master, Tensor param, Tensor remainder) {
  TRAINER_RETURN_IF_ERROR(CheckMasterHalves(*this, "JoinMasterHalves", master, param, remainder));
  return RunMasterHalves(master, param, remainder, true);
}

Status Backend::SplitMasterHalves(Tensor param, Tensor remainder, Tensor master) {
  TRAINER_RETURN_IF_ERROR(CheckMasterHalves(*this, "SplitMasterHalves", master, param, remainder));
  return RunMasterHalves(master, param, remainder, false);
}

Status Backend::SumInto(Tensor total, Tensor x, SumOf what, bool accumulate) {
  OpContract c(*this, "SumInto");
  c.Has("total", total, DType::kF64, 1);
  if (!x.empty() && x.numel() > 0) c.Has("x", x, kF32, -1);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunSumInto(total, x, what, accumulate);
}

}  // namespace trainer
