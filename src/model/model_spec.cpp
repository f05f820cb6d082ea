// ModelSpec (model_spec.h): the two families' parts and parameters, their names, FLOPs and the
// RoPE table.
#include "model/model_spec.h"

#include <cmath>
#include <cstdio>

#include "model/lora.h"

namespace trainer {

ModelSpec MakeModelSpec(const ModelConfig& m) {
  ModelSpec s;
  s.arch = m.arch;
  s.hidden = m.hidden_size;
  s.layers = m.num_layers;
  s.heads = m.num_heads;
  s.kv_heads = m.kv_heads();
  s.head_dim = m.head_size();
  s.ffn = m.ffn_size();
  s.vocab = m.vocab_size;
  s.padded_vocab = m.padded_vocab();
  s.max_positions = m.max_seq_len;
  if (m.lora()) {
    s.lora_rank = m.lora_rank;
    s.lora_scale = static_cast<float>(m.lora_alpha / m.lora_rank);
    s.lora_bases = LoraBaseRoles(m);
  }
  if (m.arch != "llama") {  // gpt2: the defaults above, with or without biases
    s.qkv_bias = s.linear_bias = s.layernorm_bias = m.bias;
    return s;
  }
  s.norm = NormKind::kRmsNorm;
  s.norm_eps = static_cast<float>(m.norm_eps);
  s.position = PositionKind::kRope;
  s.rope_theta = m.rope_theta;
  s.rope_scaling.type = m.rope_scaling;
  s.rope_scaling.factor = m.rope_factor;
  s.rope_scaling.low_freq_factor = m.rope_low_freq_factor;
  s.rope_scaling.high_freq_factor = m.rope_high_freq_factor;
  s.rope_scaling.original_max_positions = m.rope_original_max_positions;
  s.mlp = MlpKind::kSwiGlu;
  s.fused_qkv = false;
  s.qkv_bias = m.qkv_bias;
  s.qk_norm = m.qk_norm;
  s.qk_norm_full = m.qk_norm && m.qk_norm_type == "full";
  s.linear_bias = false;
  s.tied_embeddings = m.tie_embeddings;
  if (!m.moe()) return s;
  MoeSpec& e = s.moe;
  e.num_experts = m.num_experts;
  e.top_k = m.moe_router_topk;
  e.ffn = m.moe_ffn_size();
  e.shared_ffn = m.moe_shared_expert_intermediate_size;
  e.layer_freq = m.moe_layer_freq;
  e.first_k_dense = m.moe_first_k_dense;
  e.score = m.moe_router_score_function == "sigmoid" ? MoeScore::kSigmoid : MoeScore::kSoftmax;
  e.pre_softmax = m.moe_router_pre_softmax;
  e.norm_topk_prob = m.moe_norm_topk_prob;
  e.aux_loss_coeff = m.moe_aux_loss_coeff;
  e.aux_loss =
      m.moe_router_load_balancing_type == "seq_aux_loss" ? MoeAuxLoss::kSequence : MoeAuxLoss::kMicroBatch;
  e.z_loss_coeff = m.moe_z_loss_coeff;
  e.capacity_factor = m.moe_expert_capacity_factor;
  e.bias_update_rate = m.moe_router_bias_update_rate;
  return s;
}

std::string ParameterName(const ModelSpec& spec, ParamRole role, int layer) {
  const bool gpt2 = spec.arch != "llama";
  const std::string block = gpt2 ? "transformer.h." + std::to_string(layer) + "."
                                 : "model.layers." + std::to_string(layer) + ".";
  switch (role) {
    case ParamRole::kTokenEmbedding:
      return gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
    case ParamRole::kPositionEmbedding:
      return "transformer.wpe.weight";
    case ParamRole::kFinalNormWeight:
      return gpt2 ? "transformer.ln_f.weight" : "model.norm.weight";
    case ParamRole::kFinalNormBias:
      return "transformer.ln_f.bias";
    case ParamRole::kLmHead:
      return "lm_head.weight";
    case ParamRole::kNorm1Weight:
      return block + (gpt2 ? "ln_1.weight" : "input_layernorm.weight");
    case ParamRole::kNorm1Bias:
      return block + "ln_1.bias";
    case ParamRole::kQkvWeight:
      return block + "attn.c_attn.weight";
    case ParamRole::kQkvBias:
      return block + "attn.c_attn.bias";
    case ParamRole::kQWeight:
      return block + "self_attn.q_proj.weight";
    case ParamRole::kKWeight:
      return block + "self_attn.k_proj.weight";
    case ParamRole::kVWeight:
      return block + "self_attn.v_proj.weight";
    case ParamRole::kQBias:
      return block + "self_attn.q_proj.bias";
    case ParamRole::kKBias:
      return block + "self_attn.k_proj.bias";
    case ParamRole::kVBias:
      return block + "self_attn.v_proj.bias";
    case ParamRole::kQNorm:
      return block + "self_attn.q_norm.weight";
    case ParamRole::kKNorm:
      return block + "self_attn.k_norm.weight";
    case ParamRole::kAttnOutWeight:
      return block + (gpt2 ? "attn.c_proj.weight" : "self_attn.o_proj.weight");
    case ParamRole::kAttnOutBias:
      return block + "attn.c_proj.bias";
    case ParamRole::kNorm2Weight:
      return block + (gpt2 ? "ln_2.weight" : "post_attention_layernorm.weight");
    case ParamRole::kNorm2Bias:
      return block + "ln_2.bias";
    case ParamRole::kFcWeight:
      return block + "mlp.c_fc.weight";
    case ParamRole::kFcBias:
      return block + "mlp.c_fc.bias";
    case ParamRole::kGateWeight:
      return block + "mlp.gate_proj.weight";
    case ParamRole::kUpWeight:
      return block + "mlp.up_proj.weight";
    case ParamRole::kFcOutWeight:
      return block + (gpt2 ? "mlp.c_proj.weight" : "mlp.down_proj.weight");
    case ParamRole::kFcOutBias:
      return block + "mlp.c_proj.bias";
    case ParamRole::kRouterWeight:
      return block + "mlp.gate.weight";
    case ParamRole::kSharedExpertGateWeight:
      return block + "mlp.shared_expert_gate.weight";
    case ParamRole::kExpertGateUp:
      return block + "mlp.experts.gate_up_proj";
    case ParamRole::kExpertDown:
      return block + "mlp.experts.down_proj";
    case ParamRole::kSharedGateWeight:
      return block + "mlp.shared_expert.gate_proj.weight";
    case ParamRole::kSharedUpWeight:
      return block + "mlp.shared_expert.up_proj.weight";
    case ParamRole::kSharedDownWeight:
      return block + "mlp.shared_expert.down_proj.weight";
    case ParamRole::kExpertBias:
      return block + "mlp.gate.e_score_correction_bias";
    case ParamRole::kLoraA:
    case ParamRole::kLoraB:
      break;  // LoraParameterName (lora.h)
  }
  return "";
}

bool IsResidualProjection(ParamRole role) {
  return role == ParamRole::kAttnOutWeight || role == ParamRole::kFcOutWeight ||
         role == ParamRole::kExpertDown || role == ParamRole::kSharedDownWeight;
}

bool IsNormWeight(ParamRole role) {
  return role == ParamRole::kNorm1Weight || role == ParamRole::kNorm2Weight ||
         role == ParamRole::kFinalNormWeight || role == ParamRole::kQNorm ||
         role == ParamRole::kKNorm;
}

namespace {

bool IsResidualNorm(ParamRole role) {
  return role == ParamRole::kNorm1Weight || role == ParamRole::kNorm1Bias ||
         role == ParamRole::kNorm2Weight || role == ParamRole::kNorm2Bias ||
         role == ParamRole::kFinalNormWeight || role == ParamRole::kFinalNormBias;
}

}  // namespace

std::vector<ParameterSpec> SpecParameters(const ModelSpec& spec, bool sequence_parallel,
                                          int tp_size, bool first_stage, bool last_stage,
                                          int first_layer, int num_layers) {
  const int64_t C = spec.hidden, F = spec.ffn, V = spec.padded_vocab;
  std::vector<ParameterSpec> list;
  auto add = [&](ParamRole role, int layer, std::vector<int64_t> shape, ShardKind shard) {
    ParameterSpec p;
    p.role = role;
    p.layer = layer;
    p.name = ParameterName(spec, role, layer);
    p.full_shape = std::move(shape);
    p.shard = shard;
    p.weight_decay = p.full_shape.size() >= 2;
    const bool tp = tp_size > 1;
    p.grad_sum_over_tp = tp && ((sequence_parallel && IsResidualNorm(role)) ||
                                role == ParamRole::kQNorm || role == ParamRole::kKNorm);
    list.push_back(std::move(p));
  };
  auto contiguous = [&] { list.back().contiguous_with_next = true; };
  if (first_stage || (last_stage && spec.tied_embeddings))
    add(ParamRole::kTokenEmbedding, -1, {V, C}, ShardKind::kSplitRows);
  if (first_stage && spec.position == PositionKind::kLearned)
    add(ParamRole::kPositionEmbedding, -1, {spec.max_positions, C}, ShardKind::kReplicated);
  const bool ln = spec.norm_bias();
  for (int l = first_layer; l < first_layer + num_layers; ++l) {
    add(ParamRole::kNorm1Weight, l, {C}, ShardKind::kReplicated);
    if (ln) add(ParamRole::kNorm1Bias, l, {C}, ShardKind::kReplicated);
    if (spec.fused_qkv) {
      add(ParamRole::kQkvWeight, l, {spec.qkv_width(), C}, ShardKind::kSplitQkvRows);
      if (spec.qkv_bias) add(ParamRole::kQkvBias, l, {spec.qkv_width()}, ShardKind::kSplitQkvRows);
    } else {
      add(ParamRole::kQWeight, l, {spec.q_width(), C}, ShardKind::kSplitRows);
      contiguous();
      add(ParamRole::kKWeight, l, {spec.kv_width(), C}, ShardKind::kSplitRows);
      contiguous();
      add(ParamRole::kVWeight, l, {spec.kv_width(), C}, ShardKind::kSplitRows);
      if (spec.qkv_bias) {
        add(ParamRole::kQBias, l, {spec.q_width()}, ShardKind::kSplitRows);
        contiguous();
        add(ParamRole::kKBias, l, {spec.kv_width()}, ShardKind::kSplitRows);
        contiguous();
        add(ParamRole::kVBias, l, {spec.kv_width()}, ShardKind::kSplitRows);
      }
    }
    if (spec.qk_norm) {
      add(ParamRole::kQNorm, l, {spec.qk_norm_full ? spec.q_width() : spec.head_dim},
          ShardKind::kReplicated);
      add(ParamRole::kKNorm, l, {spec.qk_norm_full ? spec.kv_width() : spec.head_dim},
          ShardKind::kReplicated);
    }
    add(ParamRole::kAttnOutWeight, l, {C, spec.q_width()}, ShardKind::kSplitCols);
    if (spec.linear_bias) add(ParamRole::kAttnOutBias, l, {C}, ShardKind::kReplicated);
    add(ParamRole::kNorm2Weight, l, {C}, ShardKind::kReplicated);
    if (ln) add(ParamRole::kNorm2Bias, l, {C}, ShardKind::kReplicated);
    if (spec.moe_layer(l)) {  // experts replicated over TP (not split), like the router
      const MoeSpec& e = spec.moe;
      const int64_t E = e.num_experts, Fe = e.ffn, Fs = e.shared_ffn;
      add(ParamRole::kRouterWeight, l, {E, C}, ShardKind::kReplicated);
      if (Fs > 0) {
        contiguous();
        add(ParamRole::kSharedExpertGateWeight, l, {1, C}, ShardKind::kReplicated);
      }
      add(ParamRole::kExpertGateUp, l, {E, 2 * Fe, C}, ShardKind::kSplitExperts);
      add(ParamRole::kExpertDown, l, {E, C, Fe}, ShardKind::kSplitExperts);
      if (Fs > 0) {
        add(ParamRole::kSharedGateWeight, l, {Fs, C}, ShardKind::kReplicated);
        contiguous();
        add(ParamRole::kSharedUpWeight, l, {Fs, C}, ShardKind::kReplicated);
        add(ParamRole::kSharedDownWeight, l, {C, Fs}, ShardKind::kReplicated);
      }
      if (e.bias_update_rate > 0) add(ParamRole::kExpertBias, l, {E}, ShardKind::kReplicated);
      continue;
    }
    if (spec.mlp == MlpKind::kGelu) {
      add(ParamRole::kFcWeight, l, {F, C}, ShardKind::kSplitRows);
      if (spec.linear_bias) add(ParamRole::kFcBias, l, {F}, ShardKind::kSplitRows);
    } else {
      add(ParamRole::kGateWeight, l, {F, C}, ShardKind::kSplitRows);
      contiguous();
      add(ParamRole::kUpWeight, l, {F, C}, ShardKind::kSplitRows);
    }
    add(ParamRole::kFcOutWeight, l, {C, F}, ShardKind::kSplitCols);
    if (spec.linear_bias) add(ParamRole::kFcOutBias, l, {C}, ShardKind::kReplicated);
  }
  if (last_stage) {
    add(ParamRole::kFinalNormWeight, -1, {C}, ShardKind::kReplicated);
    if (ln) add(ParamRole::kFinalNormBias, -1, {C}, ShardKind::kReplicated);
    if (!spec.tied_embeddings) add(ParamRole::kLmHead, -1, {V, C}, ShardKind::kSplitRows);
  }
  return list;
}

bool CountsForFlops(const ModelSpec& spec, ParamRole role) {
  // GPT-2's position table counts, as nanoGPT and the GPT-2 peer count it.
  if (role == ParamRole::kTokenEmbedding) return spec.tied_embeddings;
  return true;
}

namespace {
// Sum over the whole model's parameters of weight(p) * elements.
template <typename Weight>
double CountParameters(const ModelSpec& spec, Weight weight) {
  double total = 0;
  for (const ParameterSpec& p :
       SpecParameters(spec, false, 1, true, true, 0, static_cast<int>(spec.layers))) {
    double n = 1;
    for (int64_t d : p.full_shape) n *= static_cast<double>(d);
    total += weight(p) * n;
  }
  return total;
}
}  // namespace

double ActiveParameters(const ModelSpec& spec) {
  return CountParameters(spec, [&](const ParameterSpec& p) {
    if (!CountsForFlops(spec, p.role)) return 0.0;
    const bool expert = p.role == ParamRole::kExpertGateUp || p.role == ParamRole::kExpertDown;
    return expert ? static_cast<double>(spec.moe.top_k) / spec.moe.num_experts : 1.0;
  });
}

double TotalParameters(const ModelSpec& spec) {
  return CountParameters(spec, [](const ParameterSpec&) { return 1.0; });
}

std::string MoeShapeText(const ModelSpec& spec) {
  const MoeSpec& e = spec.moe;
  if (!e.enabled()) return "";
  std::string layers;
  int count = 0;
  for (int l = 0; l < spec.layers; ++l) {
    if (!spec.moe_layer(l)) continue;
    layers += (count++ ? "," : "") + std::to_string(l);
  }
  auto millions = [](double n) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2fM", n / 1e6);
    return std::string(text);
  };
  std::string text = std::to_string(e.num_experts) + " experts, top-" + std::to_string(e.top_k) +
                     ", expert FFN " + std::to_string(e.ffn);
  if (e.shared_ffn > 0) text += ", shared expert FFN " + std::to_string(e.shared_ffn);
  char capacity[48];
  std::snprintf(capacity, sizeof capacity, ", capacity factor %g", e.capacity_factor);
  text += e.capacity_factor > 0 ? capacity : ", dropless";
  return text + "; MoE layers " + layers + " of " + std::to_string(spec.layers) + "; " +
         millions(ActiveParameters(spec)) + " active of " + millions(TotalParameters(spec)) +
         " parameters";
}

double TrainingFlopsPerToken(const ModelSpec& spec, int64_t seq_len) {
  const double active = ActiveParameters(spec);
  double adapters = 0;  // LoRA: the frozen weights' gradients are not computed
  for (const ParameterSpec& p : LoraSpecParameters(spec, 1, 0, static_cast<int>(spec.layers)))
    adapters += static_cast<double>(p.full_shape[0] * p.full_shape[1]);
  const double per_weight = spec.lora_rank > 0 ? 4.0 : 6.0;
  return per_weight * active + 6.0 * adapters +
         12.0 * static_cast<double>(spec.layers) * static_cast<double>(spec.q_width()) *
             static_cast<double>(seq_len);
}

std::vector<float> MakeRopeTable(const ModelSpec& spec, int64_t positions) {
  const int64_t half = spec.head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const float dim = static_cast<float>(spec.head_dim);
  for (int64_t i = 0; i < half; ++i)  // in f32, as transformers computes it
    inv_freq[i] =
        1.f / std::pow(static_cast<float>(spec.rope_theta), static_cast<float>(2 * i) / dim);
  const RopeScaling& r = spec.rope_scaling;
  if (r.type == "llama3") {
    const double pi = 3.14159265358979323846;
    const double low_wavelen = r.original_max_positions / r.low_freq_factor;
    const double high_wavelen = r.original_max_positions / r.high_freq_factor;
    for (float& f : inv_freq) {
      const double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / r.factor);
      } else if (wavelen >= high_wavelen) {  // between: blend the scaled and the original
        const double smooth = (r.original_max_positions / wavelen - r.low_freq_factor) /
                              (r.high_freq_factor - r.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / r.factor + smooth * f);
      }
    }
  }
  std::vector<float> table(static_cast<size_t>(2 * positions * half));
  for (int64_t t = 0; t < positions; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i];
      table[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      table[(positions + t) * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  return table;
}

}  // namespace trainer
