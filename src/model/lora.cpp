// LoRA adapters (lora.h): their parameters in the spec, and the adapter's forward and backward
// through the backend's matmul ops.
#include "model/lora.h"

#include <algorithm>

#include "common/log.h"
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

namespace {

// The adapter parameter A (is_b false) or B of `base` in block l.
ParameterSpec LoraParameter(const ModelSpec& spec, int tp_size, ParamRole base, int l, bool is_b) {
  const int64_t C = spec.hidden, F = spec.ffn, r = spec.lora_rank;
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
  return p;
}

}  // namespace

std::vector<ParameterSpec> LoraSpecParameters(const ModelSpec& spec, int tp_size, int first_layer,
                                              int num_layers) {
  std::vector<ParameterSpec> list;
  for (int l = first_layer; l < first_layer + num_layers; ++l) {
    for (int group = 0; group < kLoraGroups; ++group) {
      std::vector<ParamRole> members;
      for (ParamRole base : spec.lora_bases)
        if (LoraGroupOf(LoraSlotOf(base)) == group) members.push_back(base);
      for (bool is_b : {false, true}) {
        for (ParamRole base : members) {
          list.push_back(LoraParameter(spec, tp_size, base, l, is_b));
          // The group's A's form one matrix (LoraAdapters::a).
          list.back().contiguous_with_next = !is_b && base != members.back();
        }
      }
    }
  }
  return list;
}

LoraGroup LoraGroupOf(LoraSlot slot) {
  switch (slot) {
    case kLoraQ:
    case kLoraK:
    case kLoraV:
      return kLoraQkv;
    case kLoraO:
      return kLoraAttnOut;
    case kLoraGate:
    case kLoraUp:
      return kLoraMlpIn;
    default:
      return kLoraMlpOut;
  }
}

bool LoraAdapters::covers_output() const {
  int64_t next = 0;
  for (int i = 0; i < size; ++i) {
    if (member[i].first_column != next) return false;
    next += Rows(member[i].b);
  }
  return size > 0 && next == member[0].base_width;
}

LoraAdapters GroupLoraAdapters(const LoraAdapter* slots, LoraGroup group) {
  LoraAdapters out;
  bool stacked = true;
  for (int slot = 0; slot < kLoraSlots; ++slot) {
    const LoraAdapter& w = slots[slot];
    if (!w.present() || LoraGroupOf(w.slot) != group) continue;
    if (out.size == 0) {
      out.a = w.a;
    } else {
      const char* next = static_cast<const char*>(out.a.data) +
                         out.a.numel() * static_cast<int64_t>(DTypeSize(out.a.dtype));
      stacked = stacked && w.a.data == next && Cols(w.a) == Cols(out.a) &&
                w.a.dtype == out.a.dtype;
      out.a.shape[0] += Rows(w.a);
    }
    out.member[out.size++] = w;
  }
  if (!stacked) out.a = Tensor();
  return out;
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

// The group's A's as one matrix (GroupLoraAdapters), or the bug that broke it named.
Status CheckStacked(const LoraAdapters& w) {
  if (w.a.empty())
    return RuntimeError(StrFormat(
        "LoRA: the A matrices of the adapters of slot %d and the ones after it do not lie back to "
        "back in memory. This is a bug in LoraSpecParameters or the parameter layout.",
        static_cast<int>(w.member[0].slot)));
  return Status::Ok();
}

}  // namespace

DropoutKey AdapterDropoutKey(const LoraContext& ctx, const LoraAdapter& w) {
  DropoutKey key = ctx.dropout;
  key.kind = kDropoutLora + static_cast<uint32_t>(w.slot);
  key.first_column = w.first_input;
  return key;
}

Status LoraForward(const LoraContext& ctx, const LoraAdapters& w, Tensor x, Tensor u, Tensor y,
                   GradientWrite y_write) {
  TRAINER_RETURN_IF_ERROR(CheckStacked(w));
  Backend* be = ctx.backend;
  const int64_t N = Rows(x), r = Rows(w.member[0].a);
  const Tensor U = Matrix(u, N, w.size * r);
  // U = scale x' a^T (N, G r), x' = x, or each member's dropout(x) (Model.lora_dropout).
  if (!ctx.dropout.on()) {
    TRAINER_RETURN_IF_ERROR(be->MatmulColumns(Columns(U), GradientWrite::kOverwrite,
                                              Columns(Matrix(x, N, Cols(x))), w.a, Tensor(),
                                              ctx.scale));
  } else {
    for (int i = 0; i < w.size; ++i) {
      Tensor input;
      TRAINER_RETURN_IF_ERROR(AdapterInput(ctx, w.member[i], x, &input));
      TRAINER_RETURN_IF_ERROR(be->MatmulColumns(Columns(U, i * r, r), GradientWrite::kOverwrite,
                                                Columns(input), w.member[i].a, Tensor(),
                                                ctx.scale));
    }
  }
  // y[:, block_i] (+)= U[:, i r : (i+1) r] B_i^T.
  for (int i = 0; i < w.size; ++i) {
    const LoraAdapter& m = w.member[i];
    TRAINER_RETURN_IF_ERROR(be->MatmulColumns(Columns(Matrix(y, N, m.base_width), m.first_column,
                                                      Rows(m.b)),
                                              y_write, Columns(U, i * r, r), m.b, Tensor()));
  }
  return Status::Ok();
}

Status LoraBackward(const LoraContext& ctx, const LoraAdapters& w, const LoraAdapters& g, Tensor x,
                    Tensor u, Tensor dy, Tensor dx, GradientWrite dx_write) {
  TRAINER_RETURN_IF_ERROR(CheckStacked(w));
  TRAINER_RETURN_IF_ERROR(CheckStacked(g));
  Backend* be = ctx.backend;
  const int64_t N = Rows(x), in = Cols(x), r = Rows(w.member[0].a);
  const Tensor U = Matrix(u, N, w.size * r), dU = Matrix(ctx.scratch.du, N, w.size * r);
  // dU[:, i r : (i+1) r] = dy[:, block_i] B_i; dB_i += dy[:, block_i]^T U_i.
  for (int i = 0; i < w.size; ++i) {
    const LoraAdapter& m = w.member[i];
    TRAINER_RETURN_IF_ERROR(be->MatmulBackwardColumns(
        Columns(dU, i * r, r), GradientWrite::kOverwrite, g.member[i].b,
        Columns(Matrix(dy, N, m.base_width), m.first_column, Rows(m.b)), Columns(U, i * r, r),
        m.b));
  }
  // U = scale x' a^T: da += scale dU^T x', dx (+)= scale dU a (through each member's dropout).
  const Tensor dx2 = Matrix(dx, N, in);
  if (!ctx.dropout.on())
    return be->MatmulBackwardColumns(Columns(dx2), dx_write, g.a, Columns(dU),
                                     Columns(Matrix(x, N, in)), w.a, ctx.scale);
  const Tensor din = Matrix(ctx.scratch.din, N, in);
  for (int i = 0; i < w.size; ++i) {
    Tensor input;
    TRAINER_RETURN_IF_ERROR(AdapterInput(ctx, w.member[i], x, &input));
    TRAINER_RETURN_IF_ERROR(be->MatmulBackwardColumns(Columns(din), GradientWrite::kOverwrite,
                                                      g.member[i].a, Columns(dU, i * r, r),
                                                      Columns(input), w.member[i].a, ctx.scale));
    const bool first_write = i == 0 && dx_write == GradientWrite::kOverwrite;
    TRAINER_RETURN_IF_ERROR(
        be->Dropout(dx2, din, first_write ? Tensor() : dx2, AdapterDropoutKey(ctx, w.member[i])));
  }
  return Status::Ok();
}

}  // namespace trainer
