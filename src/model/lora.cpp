// LoRA adapters (lora.h): their parameters in the spec, and the adapter's forward and backward
// through the backend's matmul ops.
#include "model/lora.h"

#include <algorithm>

#include "config/lora_targets.h"

namespace trainer {

std::vector<ParamRole> LoraBaseRoles(const ModelConfig& model) {
  std::vector<ParamRole> roles;
  std::vector<std::string> targets;
  std::string error;
  if (!model.lora() || !ParseLoraTargets(model, &targets, &error)) return roles;
  for (const std::string& t : targets) {
    if (t == "q") roles.push_back(ParamRole::kQWeight);
    if (t == "k") roles.push_back(ParamRole::kKWeight);
    if (t == "v") roles.push_back(ParamRole::kVWeight);
    if (t == "o" || t == "c_proj") roles.push_back(ParamRole::kAttnOutWeight);
    if (t == "gate") roles.push_back(ParamRole::kGateWeight);
    if (t == "up") roles.push_back(ParamRole::kUpWeight);
    if (t == "down" || t == "c_proj") roles.push_back(ParamRole::kFcOutWeight);
    if (t == "c_attn") roles.push_back(ParamRole::kQkvWeight);
    if (t == "c_fc") roles.push_back(ParamRole::kFcWeight);
  }
  std::sort(roles.begin(), roles.end(),
            [](ParamRole x, ParamRole y) { return LoraSlotOf(x) < LoraSlotOf(y); });
  return roles;
}

LoraSlot LoraSlotOf(ParamRole base) {
  switch (base) {
    case ParamRole::kQWeight:
    case ParamRole::kQkvWeight:
      return kLoraQ;
    case ParamRole::kKWeight:
      return kLoraK;
    case ParamRole::kVWeight:
      return kLoraV;
    case ParamRole::kAttnOutWeight:
      return kLoraO;
    case ParamRole::kGateWeight:
    case ParamRole::kFcWeight:
      return kLoraGate;
    case ParamRole::kUpWeight:
      return kLoraUp;
    default:
      return kLoraDown;
  }
}

std::string LoraParameterName(const ModelSpec& spec, ParamRole base, int layer, bool b) {
  std::string name = ParameterName(spec, base, layer);  // "....q_proj.weight"
  name.erase(name.size() - std::string("weight").size());
  return name + (b ? "lora_B.weight" : "lora_A.weight");
}

std::vector<ParameterSpec> LoraSpecParameters(const ModelSpec& spec, int tp_size, int first_layer,
                                              int num_layers) {
  const int64_t C = spec.hidden, F = spec.ffn, r = spec.lora_rank;
  std::vector<ParameterSpec> list;
  for (int l = first_layer; l < first_layer + num_layers; ++l) {
    for (ParamRole base : spec.lora_bases) {
      int64_t in = C, out = F;
      ShardKind base_shard = ShardKind::kSplitRows;
      switch (base) {
        case ParamRole::kQWeight:
          out = spec.q_width();
          break;
        case ParamRole::kKWeight:
        case ParamRole::kVWeight:
          out = spec.kv_width();
          break;
        case ParamRole::kQkvWeight:
          out = spec.qkv_width();
          base_shard = ShardKind::kSplitQkvRows;
          break;
        case ParamRole::kAttnOutWeight:
          in = spec.q_width();
          out = C;
          base_shard = ShardKind::kSplitCols;
          break;
        case ParamRole::kFcOutWeight:
          in = F;
          out = C;
          base_shard = ShardKind::kSplitCols;
          break;
        default:  // gate, up, c_fc: (F, C)
          break;
      }
      const bool row_parallel = base_shard == ShardKind::kSplitCols;
      for (bool is_b : {false, true}) {
        ParameterSpec p;
        p.role = is_b ? ParamRole::kLoraB : ParamRole::kLoraA;
        p.lora_base = base;
        p.layer = l;
        p.name = LoraParameterName(spec, base, l, is_b);
        p.full_shape = is_b ? std::vector<int64_t>{out, r} : std::vector<int64_t>{r, in};
        // Column-parallel base: A whole, B split like W. Row-parallel: A split like W, B whole.
        const bool whole = is_b == row_parallel;
        p.shard = whole ? ShardKind::kReplicated : (is_b ? base_shard : ShardKind::kSplitCols);
        p.grad_sum_over_tp = whole && tp_size > 1;
        list.push_back(std::move(p));
      }
    }
  }
  return list;
}

namespace {

// `t` seen as the matrix (rows, cols) (views of scratch and activations for the matmul ops).
Tensor Matrix(Tensor t, int64_t rows, int64_t cols) {
  return Tensor(t.data, t.dtype, {rows, cols});
}

// The adapter's input as A reads it: x, or dropout(x) in scratch.dropped (Model.lora_dropout).
Status AdapterInput(const LoraContext& ctx, const LoraAdapter& w, Tensor x, Tensor* out) {
  const int64_t N = Rows(x), in = Cols(x);
  *out = Matrix(x, N, in);
  if (!ctx.dropout.on()) return Status::Ok();
  *out = Matrix(ctx.scratch.dropped, N, in);
  return ctx.backend->Dropout(*out, Matrix(x, N, in), Tensor(), AdapterDropoutKey(ctx, w));
}

}  // namespace

DropoutKey AdapterDropoutKey(const LoraContext& ctx, const LoraAdapter& w) {
  DropoutKey key = ctx.dropout;
  key.kind = kDropoutLora + static_cast<uint32_t>(w.slot);
  key.first_column = w.first_input;
  return key;
}

Status LoraForward(const LoraContext& ctx, const LoraAdapter& w, Tensor x, Tensor u, Tensor y) {
  Backend* be = ctx.backend;
  const int64_t N = Rows(x), r = w.a.dim(0);
  const Tensor u2 = Matrix(u, N, r);
  Tensor input;
  TRAINER_RETURN_IF_ERROR(AdapterInput(ctx, w, x, &input));
  // u = scale x' A^T (N,r); y[:, block] += u B^T.
  TRAINER_RETURN_IF_ERROR(
      be->MatmulForward(u2, Tensor(), input, w.a, Tensor(), Activation::kNone));
  TRAINER_RETURN_IF_ERROR(be->Scale(u2, ctx.scale));
  return be->MatmulAddToColumns(Matrix(y, N, w.base_width), w.first_column, u2, w.b);
}

Status LoraBackward(const LoraContext& ctx, const LoraAdapter& w, const LoraAdapter& g, Tensor x,
                    Tensor u, Tensor dy, Tensor dx) {
  Backend* be = ctx.backend;
  const int64_t N = Rows(x), in = Cols(x), r = w.a.dim(0);
  // du = dy[:, block] B; dB += dy[:, block]^T u.
  const Tensor du = Matrix(ctx.scratch.du, N, r);
  TRAINER_RETURN_IF_ERROR(be->MatmulBackwardFromColumns(du, GradientWrite::kOverwrite, g.b,
                                                        Matrix(dy, N, w.base_width),
                                                        w.first_column, Matrix(u, N, r), w.b));
  // u = scale x' A^T, x' = dropout(x) or x: dA += scale du^T x', dx += dropout(scale du A) (the
  // same mask, drawn again).
  TRAINER_RETURN_IF_ERROR(be->Scale(du, ctx.scale));
  Tensor input;
  TRAINER_RETURN_IF_ERROR(AdapterInput(ctx, w, x, &input));
  const Tensor dx2 = Matrix(dx, N, in);
  if (!ctx.dropout.on())
    return be->MatmulBackwardFromColumns(dx2, GradientWrite::kAccumulate, g.a, du, 0, input, w.a);
  const Tensor din = Matrix(ctx.scratch.din, N, in);
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackwardFromColumns(din, GradientWrite::kOverwrite, g.a, du, 0, input, w.a));
  return be->Dropout(dx2, din, dx2, AdapterDropoutKey(ctx, w));
}

}  // namespace trainer
