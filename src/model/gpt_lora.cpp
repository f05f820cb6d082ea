// GptModel's LoRA parts (gpt.h, lora.h): the frozen base weights in a buffer of their own, the
// sink that frozen norms' backward writes into, the adapters' views, activations and scratch.
#include <algorithm>

#include "common/check.h"
#include "model/gpt.h"

namespace trainer {
namespace {

bool IsNormParameter(ParamRole role) {
  return IsNormWeight(role) || role == ParamRole::kNorm1Bias || role == ParamRole::kNorm2Bias ||
         role == ParamRole::kFinalNormBias;
}

}  // namespace

Tensor GptModel::FrozenParameter(const ParameterInfo& p) const {
  Tensor t(static_cast<char*>(frozen_buffer_.data) + p.offset * DTypeSize(compute_), compute_, {});
  for (int64_t s : p.local_shape) t.shape[t.ndim++] = s;
  return t;
}

const ParameterInfo* GptModel::FindFrozen(ParamRole role, int layer) const {
  for (const ParameterInfo& p : frozen_params_)
    if (p.role == role && p.layer == layer) return &p;
  return nullptr;
}

Tensor GptModel::FrozenGradientSink(ParamRole role) const {
  // The norms' backward ops always write their weight (and bias) gradients; a frozen norm's go
  // here. Weights in row 0, biases (and k_norm) in row 1, so that no op sees them alias.
  if (norm_sink_.empty() || !IsNormParameter(role)) return Tensor();
  const bool second = role == ParamRole::kKNorm || role == ParamRole::kNorm1Bias ||
                      role == ParamRole::kNorm2Bias || role == ParamRole::kFinalNormBias;
  const int64_t width = norm_sink_.dim(1);
  const int64_t qk = spec_.qk_norm_full ? spec_.q_width() : spec_.head_dim;  // NKV = NH there
  const int64_t n = role == ParamRole::kQNorm || role == ParamRole::kKNorm ? qk : spec_.hidden;
  Tensor row = norm_sink_.rows(second ? 1 : 0, 1);
  return Tensor(row.data, DType::kF32, {std::min(n, width)});
}

void GptModel::SetLoraAdapters(int layer, bool gradients, BlockWeights* w) const {
  const int64_t tp = partition_.tp_size;
  const int64_t Ql = spec_.qkv_width() / tp, Al = spec_.q_width() / tp, KVl = spec_.kv_width() / tp;
  const int64_t Fl = spec_.ffn / tp, C = spec_.hidden;
  LoraAdapter slots[kLoraSlots];
  for (ParamRole base : spec_.lora_bases) {
    LoraAdapter& adapter = slots[LoraSlotOf(base)];
    adapter.slot = LoraSlotOf(base);
    for (const ParameterInfo& p : params_) {
      if (p.layer != layer || p.lora_base != base) continue;
      if (p.role == ParamRole::kLoraA) adapter.a = gradients ? Gradient(p) : Parameter(p);
      if (p.role == ParamRole::kLoraB) adapter.b = gradients ? Gradient(p) : Parameter(p);
    }
    switch (base) {  // where its output lies in the base linear's local output
      case ParamRole::kQWeight:
      case ParamRole::kQkvWeight:
        adapter.base_width = Ql;
        break;
      case ParamRole::kKWeight:
        adapter.first_column = Al;
        adapter.base_width = Ql;
        break;
      case ParamRole::kVWeight:
        adapter.first_column = Al + KVl;
        adapter.base_width = Ql;
        break;
      case ParamRole::kGateWeight:
        adapter.base_width = 2 * Fl;
        break;
      case ParamRole::kUpWeight:
        adapter.first_column = Fl;
        adapter.base_width = 2 * Fl;
        break;
      case ParamRole::kFcWeight:
        adapter.base_width = Fl;
        break;
      default:  // o, down: row-parallel, the whole (C) output, this rank's block of the input
        adapter.base_width = C;
        adapter.first_input = partition_.tp_rank * (base == ParamRole::kAttnOutWeight ? Al : Fl);
        break;
    }
  }
  for (int group = 0; group < kLoraGroups; ++group)
    w->lora[group] = GroupLoraAdapters(slots, static_cast<LoraGroup>(group));
}

void GptModel::AllocateLoraActivations(BlockActivations* a) {
  int members[kLoraGroups] = {};
  for (ParamRole base : spec_.lora_bases) ++members[LoraGroupOf(LoraSlotOf(base))];
  for (int group = 0; group < kLoraGroups; ++group)
    if (members[group] > 0)
      a->lora_u[group] = Alloc({B_, T_, members[group] * spec_.lora_rank}, compute_);
}

void GptModel::AllocateLoraBuffers() {
  if (frozen_params_.empty()) return;
  // With the parameters (sizing_kind_ is theirs on entry): the frozen weights, compute dtype.
  frozen_buffer_ = Alloc({static_cast<int64_t>(TotalLocalElements(frozen_params_))}, compute_);
  const int64_t tp = partition_.tp_size, N = static_cast<int64_t>(B_) * T_, r = spec_.lora_rank;
  sizing_kind_ = &ModelBufferBytes::gradients;
  norm_sink_ =
      Alloc({2, std::max({spec_.hidden, spec_.head_dim, spec_.qk_norm_full ? spec_.q_width() : 0})},
            DType::kF32);
  sizing_kind_ = &ModelBufferBytes::scratch;
  int members[kLoraGroups] = {};  // the largest group's gradient of its x A^T
  for (ParamRole base : spec_.lora_bases) ++members[LoraGroupOf(LoraSlotOf(base))];
  lora_scratch_.du = Alloc({N, *std::max_element(members, members + kLoraGroups) * r}, compute_);
  if (config_.lora_dropout > 0) {  // the widest adapter input, dropped, and its gradient
    const int64_t in = std::max({spec_.hidden, spec_.q_width() / tp, spec_.ffn / tp});
    lora_scratch_.dropped = Alloc({N, in}, compute_);
    lora_scratch_.din = Alloc({N, in}, compute_);
  }
  sizing_kind_ = &ModelBufferBytes::parameters;
}

LoraContext GptModel::LoraCtx() const {
  LoraContext ctx;
  ctx.backend = backend_;
  ctx.scale = spec_.lora_scale;
  ctx.scratch = lora_scratch_;
  return ctx;
}

Status GptModel::SetFrozenParameters(const std::vector<float>& flat) {
  TRAINER_ASSERT(flat.size() == TotalLocalElements(frozen_params_),
                 "flat frozen parameter size mismatch");
  return UploadCompute(backend_, frozen_buffer_, flat.data());
}

Status GptModel::FrozenParameterValues(std::vector<float>* flat) const {
  const size_t n = TotalLocalElements(frozen_params_);
  flat->assign(n, 0.f);
  if (n == 0) return Status::Ok();
  if (compute_ == DType::kF32)
    return backend_->CopyToHost(flat->data(), frozen_buffer_.data, n * sizeof(float));
  std::vector<uint16_t> bf16(n);
  TRAINER_RETURN_IF_ERROR(
      backend_->CopyToHost(bf16.data(), frozen_buffer_.data, n * sizeof(uint16_t)));
  for (size_t i = 0; i < n; ++i) (*flat)[i] = BF16ToFloat(bf16[i]);
  return Status::Ok();
}

}  // namespace trainer
