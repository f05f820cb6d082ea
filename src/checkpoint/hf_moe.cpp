// Mixture-of-experts classes of Hugging Face: config.json keys and expert tensors (hf_moe.h).
#include "checkpoint/hf_moe.h"

#include <set>

#include "common/log.h"
#include "model/model_spec.h"

namespace trainer {
namespace {

const char kQwen2Moe[] = "Qwen2MoeForCausalLM", kMixtral[] = "MixtralForCausalLM",
           kQwen3Moe[] = "Qwen3MoeForCausalLM", kOlmoe[] = "OlmoeForCausalLM";

// The parts of one expert: its gate, up and down projections.
enum class Part { kGate, kUp, kDown };
const Part kParts[] = {Part::kGate, Part::kUp, Part::kDown};

// Expert `e`'s `part` in block `layer` as transformers names it apart: Qwen's mlp.experts.E.*_proj
// or Mixtral's block_sparse_moe.experts.E.w1/w3/w2.
std::string ExpertName(bool mixtral, int layer, int e, Part part) {
  const char* qwen[] = {"gate_proj", "up_proj", "down_proj"};
  const char* mix[] = {"w1", "w3", "w2"};
  const int i = static_cast<int>(part);
  return mixtral
             ? StrFormat("model.layers.%d.block_sparse_moe.experts.%d.%s.weight", layer, e, mix[i])
             : StrFormat("model.layers.%d.mlp.experts.%d.%s.weight", layer, e, qwen[i]);
}

std::string MixtralRouterName(int layer) {
  return StrFormat("model.layers.%d.block_sparse_moe.gate.weight", layer);
}

// The MoE layers of `m` (ModelConfig::moe_layer), as "0,2,4".
std::string LayerList(const std::vector<int>& layers) {
  std::string text;
  for (int l : layers) text += (text.empty() ? "" : ",") + std::to_string(l);
  return text;
}

std::vector<int> MoeLayers(const ModelConfig& m) {
  std::vector<int> layers;
  for (int l = 0; l < m.num_layers; ++l)
    if (m.moe_layer(l)) layers.push_back(l);
  return layers;
}

// Renormalised chosen weights: Mixtral's top-K logits then softmax equals softmax, top-K, divide
// by the sum.
bool Renormalised(const ModelConfig& m) {
  return !m.moe_router_pre_softmax || m.moe_norm_topk_prob;
}

}  // namespace

bool IsMoeArchitecture(const std::string& a) {
  return a == kQwen2Moe || a == kMixtral || a == kQwen3Moe || a == kOlmoe;
}

Status ReadMoeConfig(const ConfigReader& r, const std::string& arch, int trained_length,
                     ModelConfig* m) {
  const bool mixtral = arch == kMixtral, qwen2 = arch == kQwen2Moe, olmoe = arch == kOlmoe;
  // OLMoE's q/k norm over all heads (Model.qk_norm_type=full) is one head's as wide: it needs as
  // many key/value heads as heads.
  if (olmoe && m->kv_heads() != m->num_heads)
    return r.Refuse(StrFormat(
        "num_key_value_heads %d is not supported with OlmoeForCausalLM's q/k norm over all heads "
        "(Model.qk_norm_type=full needs num_key_value_heads = num_attention_heads, %d)",
        m->kv_heads(), m->num_heads));
  if (olmoe && r.Has("clip_qkv"))
    return r.Refuse("clip_qkv is not supported (q, k and v are not clipped here): give null");
  // transformers' defaults where a key is absent; Mixtral's and OLMoE's experts are
  // intermediate_size wide and every layer is sparse
  const bool all_sparse = mixtral || olmoe;
  int experts = mixtral ? 8 : qwen2 ? 60 : olmoe ? 64 : 128, topk = mixtral ? 2 : qwen2 ? 4 : 8;
  int ffn = all_sparse ? m->ffn_hidden_size : qwen2 ? 1408 : 768, shared = qwen2 ? 5632 : 0;
  int step = 1;
  bool norm_topk = false, router_logits = false;
  double coef = 0.001, jitter = 0.0;
  std::string scoring = "softmax";
  std::vector<int> mlp_only;
  TRAINER_RETURN_IF_ERROR(r.Get("num_experts", &experts));
  TRAINER_RETURN_IF_ERROR(r.Get("num_local_experts", &experts));
  TRAINER_RETURN_IF_ERROR(r.Get("num_experts_per_tok", &topk));
  if (!all_sparse) TRAINER_RETURN_IF_ERROR(r.Get("moe_intermediate_size", &ffn));
  if (qwen2) TRAINER_RETURN_IF_ERROR(r.Get("shared_expert_intermediate_size", &shared));
  if (qwen2) TRAINER_RETURN_IF_ERROR(r.Get("qkv_bias", &m->qkv_bias));  // transformers 5's key
  TRAINER_RETURN_IF_ERROR(r.Get("decoder_sparse_step", &step));
  TRAINER_RETURN_IF_ERROR(r.Get("mlp_only_layers", &mlp_only));
  TRAINER_RETURN_IF_ERROR(r.Get("norm_topk_prob", &norm_topk));
  TRAINER_RETURN_IF_ERROR(r.Get("output_router_logits", &router_logits));
  TRAINER_RETURN_IF_ERROR(r.Get("router_aux_loss_coef", &coef));
  TRAINER_RETURN_IF_ERROR(r.Get("router_jitter_noise", &jitter));
  TRAINER_RETURN_IF_ERROR(r.Get("scoring_func", &scoring));
  if (scoring != "softmax")
    return r.Refuse(
        StrFormat("scoring_func %s is not supported: %s's router is a softmax over "
                  "the experts (Model.moe_router_score_function=softmax)",
                  scoring.c_str(), arch.c_str()));
  const char* experts_key = mixtral ? "num_local_experts" : "num_experts";
  if (experts <= 0)
    return r.Refuse(StrFormat("%s %d is not positive: give the model's number of experts",
                              experts_key, experts));
  if (topk <= 0 || topk > experts)
    return r.Refuse(
        StrFormat("num_experts_per_tok %d with %d experts (%s): give a number of "
                  "experts per token from 1 to %d",
                  topk, experts, experts_key, experts));
  if (ffn <= 0)
    return r.Refuse(StrFormat("the experts' intermediate size %d is not positive", ffn));
  if (qwen2 && shared <= 0)
    return r.Refuse(
        StrFormat("shared_expert_intermediate_size %d: a Qwen2MoeForCausalLM always "
                  "has a shared expert, of positive size",
                  shared));
  if (step <= 0) return r.Refuse(StrFormat("decoder_sparse_step %d is not positive", step));
  int window = 0;
  if (mixtral && r.Has("sliding_window")) {
    TRAINER_RETURN_IF_ERROR(r.Get("sliding_window", &window));
    if (window < m->max_seq_len)
      return r.Refuse(
          StrFormat("sliding_window %d is not supported (full attention only; null, "
                    "or at least max_position_embeddings %d)",
                    window, m->max_seq_len));
    if (window < trained_length)
      return r.Refuse(StrFormat(
          "sliding_window %d is shorter than Model.max_seq_len %d: transformers attends to the "
          "last %d tokens only, this trainer to all of them. Set Model.max_seq_len to at most %d",
          window, trained_length, window, window));
  }
  if (mixtral && m->rope_scaling != "none")
    LogSharedWarningOnce(StrFormat(
        "%s: a MixtralForCausalLM with rope_scaling %s. This trainer scales RoPE as transformers "
        "4.48 and later do; transformers before 4.48 ignores rope_scaling for Mixtral, so the "
        "model it computes differs",
        r.path().c_str(), m->rope_scaling.c_str()));
  if (router_logits && coef > 0)
    LogSharedWarningOnce(StrFormat(
        "%s: output_router_logits true with router_aux_loss_coef %g, taken as "
        "Model.moe_aux_loss_coeff: this trainer's load-balancing loss is Megatron's, one term "
        "per MoE layer summed over the layers; transformers pools every layer's router logits "
        "into one term, about top-k times a layer's, so the same coefficient weighs the balance "
        "differently (docs/moe.md)",
        r.path().c_str(), coef));
  if (jitter > 0)
    LogSharedWarningOnce(
        StrFormat("%s has router_jitter_noise %g, transformers' training-only noise on the "
                  "router's input: this trainer does not apply it (training goes on "
                  "without it; inference is the same)",
                  arch.c_str(), jitter));
  // The sparse layers by transformers' rule, then the (first_k_dense, layer_freq) giving them.
  const std::set<int> dense(mlp_only.begin(), mlp_only.end());
  std::vector<int> sparse;
  for (int l = 0; l < m->num_layers; ++l)
    if (all_sparse || (!dense.count(l) && (l + 1) % step == 0)) sparse.push_back(l);
  if (sparse.empty())
    return r.Refuse(
        StrFormat("decoder_sparse_step %d and mlp_only_layers leave no MoE layer of "
                  "%d: a dense model. Import it as the dense class of its family (in "
                  "config.json, architectures [\"%s\"] and model_type %s: the same attention "
                  "and MLP weights)",
                  step, m->num_layers, qwen2 ? "Qwen2ForCausalLM" : "Qwen3ForCausalLM",
                  qwen2 ? "qwen2" : "qwen3"));
  m->num_experts = experts;
  m->moe_router_topk = topk;
  m->moe_ffn_hidden_size = ffn;
  m->moe_shared_expert_intermediate_size = qwen2 ? shared : 0;
  m->moe_router_score_function = "softmax";
  m->moe_router_pre_softmax = !mixtral;
  m->moe_norm_topk_prob = !mixtral && norm_topk;
  m->moe_aux_loss_coeff = router_logits ? coef : 0.0;
  // The smallest (layer_freq, first_k_dense) giving `sparse`, the multiples of the frequency from
  // layer k on: the gap between the first two, or for one layer the smallest frequency with no
  // second multiple below num_layers; k just past the multiple before the first.
  const int first = sparse.front(), L = m->num_layers;
  int freq = sparse.size() > 1 ? sparse[1] - first : first == 0 ? L : 0;
  for (int f = 1; f <= first && freq == 0; ++f)
    if (first % f == 0 && first + f >= L) freq = f;
  if (freq > 0) {
    m->moe_layer_freq = freq;
    m->moe_first_k_dense = std::max(0, first - freq + 1);
    if (MoeLayers(*m) == sparse) return Status::Ok();
  }
  return r.Refuse(StrFormat(
      "the MoE layers %s (decoder_sparse_step %d, mlp_only_layers) are not the first dense "
      "layers then every n-th (Model.moe_first_k_dense, Model.moe_layer_freq), which is what "
      "this trainer expresses",
      LayerList(sparse).c_str(), step));
}

std::string MoeModelOverrides(const ModelConfig& m) {
  if (!m.moe()) return "";
  return StrFormat(
      " -o Model.num_experts=%d -o Model.moe_router_topk=%d -o Model.moe_ffn_hidden_size=%d "
      "-o Model.moe_shared_expert_intermediate_size=%d -o Model.moe_layer_freq=%d "
      "-o Model.moe_first_k_dense=%d -o Model.moe_router_score_function=%s "
      "-o Model.moe_router_pre_softmax=%s -o Model.moe_norm_topk_prob=%s "
      "-o Model.moe_aux_loss_coeff=%s",
      m.num_experts, m.moe_router_topk, m.moe_ffn_size(), m.moe_shared_expert_intermediate_size,
      m.moe_layer_freq, m.moe_first_k_dense, m.moe_router_score_function.c_str(),
      m.moe_router_pre_softmax ? "true" : "false", m.moe_norm_topk_prob ? "true" : "false",
      Decimal(m.moe_aux_loss_coeff).c_str());
}

std::string MoeDifference(const ModelConfig& a, const ModelConfig& b) {
  auto differs = [](const char* key, const std::string& x, const std::string& y) {
    return x == y
               ? std::string()
               : StrFormat("Model.%s is %s, the pretrained model's %s", key, x.c_str(), y.c_str());
  };
  const std::string experts =
      differs("num_experts", std::to_string(a.num_experts), std::to_string(b.num_experts));
  if (!experts.empty() || !b.moe()) return experts;
  auto text = [](bool v) { return std::string(v ? "true" : "false"); };
  const std::vector<std::tuple<const char*, std::string, std::string>> keys = {
      {"moe_router_topk", std::to_string(a.moe_router_topk), std::to_string(b.moe_router_topk)},
      {"moe_ffn_hidden_size", std::to_string(a.moe_ffn_size()), std::to_string(b.moe_ffn_size())},
      {"moe_shared_expert_intermediate_size", std::to_string(a.moe_shared_expert_intermediate_size),
       std::to_string(b.moe_shared_expert_intermediate_size)},
      {"moe_router_score_function", a.moe_router_score_function, b.moe_router_score_function}};
  for (const auto& [key, x, y] : keys)
    if (x != y) return differs(key, x, y);
  if (MoeLayers(a) != MoeLayers(b))
    return StrFormat(
        "Model.moe_first_k_dense=%d and Model.moe_layer_freq=%d make layers %s MoE layers, the "
        "pretrained model has %s",
        a.moe_first_k_dense, a.moe_layer_freq, LayerList(MoeLayers(a)).c_str(),
        LayerList(MoeLayers(b)).c_str());
  if (Renormalised(a) != Renormalised(b))
    return a.moe_router_pre_softmax != b.moe_router_pre_softmax
               ? differs("moe_router_pre_softmax", text(a.moe_router_pre_softmax),
                         text(b.moe_router_pre_softmax))
               : differs("moe_norm_topk_prob", text(a.moe_norm_topk_prob),
                         text(b.moe_norm_topk_prob));
  return "";
}

Status MoeExportClass(const ModelConfig& m, HfMoeClass* c) {
  auto refuse = [&](const std::string& why) {
    return UsageError(
        StrFormat("the checkpoint's MoE model (Model.num_experts=%d) %s; keep the "
                  "checkpoint (trainer sample and eval run it)",
                  m.num_experts, why.c_str()));
  };
  if (m.moe_router_score_function != "softmax")
    return refuse("has a " + m.moe_router_score_function +
                  " router: Qwen2-MoE, Mixtral, OLMoE and Qwen3-MoE route by a softmax");
  if (m.moe_router_bias_update_rate > 0)
    return refuse(
        "has an expert bias (Model.moe_router_bias_update_rate > 0), which no exported class "
        "(Qwen2-MoE, Mixtral, OLMoE, Qwen3-MoE) holds");
  const bool shared = m.moe_shared_expert_intermediate_size > 0;
  const bool olmoe = m.qk_norm && m.qk_norm_type == "full";
  const bool qwen3 = m.qk_norm && !olmoe, qwen2 = !m.qk_norm && (shared || m.qkv_bias);
  if (m.qk_norm && (shared || m.qkv_bias))
    return refuse(
        "has q/k norms with a shared expert or q/k/v biases: Qwen3-MoE and OLMoE have neither, "
        "Qwen2-MoE no q/k norm");
  if (qwen2 && !(shared && m.qkv_bias))
    return refuse(shared ? "has a shared expert without q/k/v biases: Qwen2-MoE has both "
                           "(Model.qkv_bias=true)"
                         : "has q/k/v biases without a shared expert: Qwen2-MoE has both "
                           "(Model.moe_shared_expert_intermediate_size > 0)");
  const bool mixtral = !qwen2 && !m.qk_norm;
  if (!qwen3 && m.head_size() * m.num_heads != m.hidden_size)
    return refuse(
        StrFormat("has head_dim %d, not hidden_size / num_heads (%d): Qwen2-MoE, "
                  "Mixtral and OLMoE derive it so",
                  m.head_size(), m.hidden_size / m.num_heads));
  const std::vector<int> sparse = MoeLayers(m);
  if ((mixtral || olmoe) && static_cast<int>(sparse.size()) != m.num_layers)
    return refuse(
        StrFormat("has dense layers (MoE layers %s of %d): Mixtral's and OLMoE's every "
                  "layer is sparse (Qwen2-MoE and Qwen3-MoE take dense layers)",
                  LayerList(sparse).c_str(), m.num_layers));
  if (mixtral && m.rope_scaling != "none")
    return refuse("scales its RoPE (Model.rope_scaling=" + m.rope_scaling +
                  "): Mixtral in transformers before 4.48 ignores rope_scaling and would compute "
                  "other logits");
  if (mixtral && !Renormalised(m))
    return refuse(
        "keeps the softmax scores of the top K unnormalised (Model.moe_router_pre_softmax=true, "
        "moe_norm_topk_prob=false): Mixtral renormalises them (set either)");
  std::vector<int> dense;
  for (int l = 0; l < m.num_layers; ++l)
    if (!m.moe_layer(l)) dense.push_back(l);
  const std::string aux =
      StrFormat("  \"output_router_logits\": %s,\n  \"router_aux_loss_coef\": %s,\n",
                m.moe_aux_loss_coeff > 0 ? "true" : "false",
                JsonFloat(m.moe_aux_loss_coeff > 0 ? m.moe_aux_loss_coeff : 0.001).c_str());
  c->architecture = mixtral ? kMixtral : qwen2 ? kQwen2Moe : olmoe ? kOlmoe : kQwen3Moe;
  c->model_type = mixtral ? "mixtral" : qwen2 ? "qwen2_moe" : olmoe ? "olmoe" : "qwen3_moe";
  c->intermediate_size = mixtral || olmoe ? m.moe_ffn_size() : m.ffn_size();
  if (mixtral) {
    c->keys = StrFormat(
        "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
        "  \"router_jitter_noise\": 0.0,\n  \"sliding_window\": null,\n%s",
        m.num_experts, m.moe_router_topk, aux.c_str());
    return Status::Ok();
  }
  if (olmoe) {
    c->keys = StrFormat(
        "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"norm_topk_prob\": %s,\n"
        "  \"clip_qkv\": null,\n%s",
        m.num_experts, m.moe_router_topk, Renormalised(m) ? "true" : "false", aux.c_str());
    return Status::Ok();
  }
  c->keys = StrFormat(
      "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n  \"moe_intermediate_size\": %d,\n"
      "%s%s  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [%s],\n"
      "  \"norm_topk_prob\": %s,\n%s",
      m.num_experts, m.moe_router_topk, m.moe_ffn_size(), qwen2 ? "  \"qkv_bias\": true,\n" : "",
      qwen2 ? StrFormat("  \"shared_expert_intermediate_size\": %d,\n",
                        m.moe_shared_expert_intermediate_size)
                  .c_str()
            : "",
      LayerList(dense).c_str(), Renormalised(m) ? "true" : "false", aux.c_str());
  return Status::Ok();
}

Status StackHuggingFaceExperts(const std::string& weights, const ModelConfig& m,
                               std::map<std::string, SafetensorsTensor>* tensors) {
  if (!m.moe()) return Status::Ok();
  const ModelSpec spec = MakeModelSpec(m);
  const int64_t E = m.num_experts, F = m.moe_ffn_size(), C = m.hidden_size;
  auto has = [&](const std::string& name) { return tensors->count(name) > 0; };
  for (int l = 0; l < m.num_layers; ++l) {
    if (!m.moe_layer(l)) continue;
    const std::string router = ParameterName(spec, ParamRole::kRouterWeight, l);
    if (has(MixtralRouterName(l))) {
      if (has(router))
        return CheckpointError(StrFormat(
            "%s (Checkpoint.init_from) holds layer %d's router twice: %s and %s. Keep one",
            weights.c_str(), l, MixtralRouterName(l).c_str(), router.c_str()));
      SafetensorsTensor t = std::move(tensors->at(MixtralRouterName(l)));
      tensors->erase(MixtralRouterName(l));
      t.name = router;
      (*tensors)[router] = std::move(t);
    }
    const std::string stacked[] = {ParameterName(spec, ParamRole::kExpertGateUp, l),
                                   ParameterName(spec, ParamRole::kExpertDown, l)};
    SafetensorsTensor built[] = {
        {stacked[0], {E, 2 * F, C}, std::vector<float>(static_cast<size_t>(E * 2 * F * C))},
        {stacked[1], {E, C, F}, std::vector<float>(static_cast<size_t>(E * C * F))}};
    for (int e = 0; e < E; ++e)
      for (Part part : kParts) {
        const int s = part == Part::kDown ? 1 : 0;
        std::vector<std::string> found;
        for (bool mixtral : {false, true})
          if (has(ExpertName(mixtral, l, e, part)))
            found.push_back(ExpertName(mixtral, l, e, part));
        if (has(stacked[s])) found.push_back(StrFormat("%s[%d]", stacked[s].c_str(), e));
        if (found.empty())
          return CheckpointError(StrFormat(
              "%s (Checkpoint.init_from) lacks expert %d of layer %d: no %s (nor %s, nor %s). "
              "A MoE layer trains with all its %lld experts: give the complete model (every "
              "shard of model.safetensors.index.json)",
              weights.c_str(), e, l, ExpertName(false, l, e, part).c_str(),
              ExpertName(true, l, e, part).c_str(), stacked[s].c_str(), static_cast<long long>(E)));
        if (found.size() > 1)
          return CheckpointError(StrFormat(
              "%s (Checkpoint.init_from) holds expert %d of layer %d twice: %s and %s. Keep one "
              "of them (an expert is stored apart or in the stacked tensor, not both)",
              weights.c_str(), e, l, found[0].c_str(), found[1].c_str()));
        if (has(stacked[s])) continue;
        const SafetensorsTensor& t = tensors->at(found[0]);
        const std::vector<int64_t> want =
            s == 1 ? std::vector<int64_t>{C, F} : std::vector<int64_t>{F, C};
        if (t.shape != want)
          return CheckpointError(StrFormat(
              "%s (Checkpoint.init_from): %s (expert %d of layer %d) is %s, the model of its "
              "config.json needs %s (hidden_size, moe_intermediate_size)",
              weights.c_str(), found[0].c_str(), e, l, ShapeText(t.shape).c_str(),
              ShapeText(want).c_str()));
        // gate_up_proj[e] is [gate; up] (2F, C); down_proj[e] is (C, F)
        const int64_t at = s == 1 ? e * C * F : e * 2 * F * C + (part == Part::kUp ? F * C : 0);
        std::copy(t.values.begin(), t.values.end(), built[s].values.begin() + at);
        tensors->erase(found[0]);
      }
    for (SafetensorsTensor& t : built)
      if (!has(t.name)) (*tensors)[t.name] = std::move(t);
    const std::string bias = ParameterName(spec, ParamRole::kExpertBias, l);
    if (m.moe_router_bias_update_rate > 0 && !has(bias))
      (*tensors)[bias] = SafetensorsTensor{bias, {E}, std::vector<float>(E, 0.f)};
  }
  return Status::Ok();
}

std::string HuggingFaceName(const std::string& architecture, const ParameterInfo& p) {
  return architecture == kMixtral && p.role == ParamRole::kRouterWeight ? MixtralRouterName(p.layer)
                                                                        : p.name;
}

bool AppendHuggingFaceMoeTensors(const ModelConfig& m, const ParameterInfo& p, const float* values,
                                 std::vector<SafetensorsTensor>* out) {
  if (!m.moe()) return false;
  HfMoeClass c;
  if (!MoeExportClass(m, &c).ok()) return false;
  const bool mixtral = c.architecture == kMixtral;
  const int64_t E = m.num_experts, F = m.moe_ffn_size(), C = m.hidden_size;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const float* from) {
    const int64_t n = shape[0] * shape[1];
    out->push_back(SafetensorsTensor{name, std::move(shape), std::vector<float>(from, from + n)});
  };
  switch (p.role) {
    case ParamRole::kRouterWeight:
      if (!mixtral) return false;
      add(MixtralRouterName(p.layer), {E, C}, values);
      return true;
    case ParamRole::kExpertGateUp:
      for (int e = 0; e < E; ++e) {
        add(ExpertName(mixtral, p.layer, e, Part::kGate), {F, C}, values + e * 2 * F * C);
        add(ExpertName(mixtral, p.layer, e, Part::kUp), {F, C}, values + e * 2 * F * C + F * C);
      }
      return true;
    case ParamRole::kExpertDown:
      for (int e = 0; e < E; ++e)
        add(ExpertName(mixtral, p.layer, e, Part::kDown), {C, F}, values + e * C * F);
      return true;
    default:
      return false;
  }
}

}  // namespace trainer
