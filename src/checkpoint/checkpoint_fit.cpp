// Whether a checkpoint's weights fit the config's model (checkpoint_fit.h).
#include "checkpoint/checkpoint_fit.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_layout.h"
#include "common/log.h"
#include "config/config_loader.h"

namespace trainer {
namespace {

// The keys beyond the sizes that shape a model's tensors (its family, biases, heads, norms,
// tied head, experts), saved (the file's /config) against the config's.
void AddStructureDifferences(hid_t f, const ModelConfig& m, std::string* diff) {
  std::string text;
  if (H5Aexists(f, "config") <= 0 || !Hdf5ReadStringAttribute(f, "config", &text).ok()) return;
  StatusOr<TrainConfig> saved_config = LoadConfigText(text, "the checkpoint's /config", {});
  if (!saved_config.ok()) return;  // the tensors' own check names what differs
  const ModelConfig& s = saved_config->model;
  const auto add = [&](const char* key, const std::string& saved, const std::string& wanted) {
    if (saved != wanted)
      *diff += StrFormat("%sModel.%s: checkpoint %s, config %s", diff->empty() ? "" : "; ", key,
                         saved.c_str(), wanted.c_str());
  };
  const auto text_of = [](int64_t v) { return std::to_string(v); };
  const auto flag = [](bool v) { return std::string(v ? "true" : "false"); };
  add("arch", s.arch, m.arch);
  if (s.arch == "gpt2" && m.arch == "gpt2") add("bias", flag(s.bias), flag(m.bias));  // GPT-2's
  // Where either sets them (else they follow num_heads and hidden_size, named above).
  if (s.num_kv_heads > 0 || m.num_kv_heads > 0)
    add("num_kv_heads", text_of(s.kv_heads()), text_of(m.kv_heads()));
  if (s.head_dim > 0 || m.head_dim > 0)
    add("head_dim", text_of(s.head_size()), text_of(m.head_size()));
  add("qkv_bias", flag(s.qkv_bias), flag(m.qkv_bias));
  add("qk_norm", flag(s.qk_norm), flag(m.qk_norm));
  if (s.qk_norm && m.qk_norm) add("qk_norm_type", s.qk_norm_type, m.qk_norm_type);
  add("tie_embeddings", flag(s.tie_embeddings), flag(m.tie_embeddings));
  add("num_experts", text_of(s.num_experts), text_of(m.num_experts));
  if (!s.moe() || !m.moe()) return;
  // 0 means ffn_hidden_size, whose own difference is named above where both leave it at 0.
  const auto expert_ffn = [](const ModelConfig& c) {
    return c.moe_ffn_hidden_size > 0 ? std::to_string(c.moe_ffn_hidden_size)
                                     : StrFormat("0 (ffn_hidden_size %d)", c.moe_ffn_size());
  };
  if ((s.moe_ffn_hidden_size > 0 || m.moe_ffn_hidden_size > 0) &&
      s.moe_ffn_size() != m.moe_ffn_size())
    add("moe_ffn_hidden_size", expert_ffn(s), expert_ffn(m));
  add("moe_shared_expert_intermediate_size", text_of(s.moe_shared_expert_intermediate_size),
      text_of(m.moe_shared_expert_intermediate_size));
  bool same_layers = s.num_layers == m.num_layers;
  for (int layer = 0; same_layers && layer < m.num_layers; ++layer)
    same_layers = s.moe_layer(layer) == m.moe_layer(layer);
  if (!same_layers) {  // which layers have experts
    add("moe_first_k_dense", text_of(s.moe_first_k_dense), text_of(m.moe_first_k_dense));
    add("moe_layer_freq", text_of(s.moe_layer_freq), text_of(m.moe_layer_freq));
  }
  if ((s.moe_router_bias_update_rate > 0) != (m.moe_router_bias_update_rate > 0))  // the bias
    add("moe_router_bias_update_rate", StrFormat("%g", s.moe_router_bias_update_rate),
        StrFormat("%g (the expert bias is a tensor where it is > 0)",
                  m.moe_router_bias_update_rate));
}

// "Model.hidden_size: checkpoint 128, config 256; ..." for every differing shape key (the family's
// and the MoE keys too).
std::string ShapeDifferences(hid_t f, const ModelConfig& m) {
  const std::pair<const char*, int64_t> keys[] = {{"hidden_size", m.hidden_size},
                                                  {"num_layers", m.num_layers},
                                                  {"num_heads", m.num_heads},
                                                  {"vocab_size", m.vocab_size},
                                                  {"padded_vocab_size", m.padded_vocab()},
                                                  {"ffn_hidden_size", m.ffn_size()},
                                                  {"max_seq_len", m.max_seq_len}};
  std::string diff;
  for (const auto& [key, expected] : keys) {
    int64_t stored = 0;
    if (!Hdf5ReadIntAttribute(f, key, &stored).ok()) continue;
    if (stored != expected)
      diff += StrFormat("%sModel.%s: checkpoint %lld, config %lld", diff.empty() ? "" : "; ", key,
                        static_cast<long long>(stored), static_cast<long long>(expected));
  }
  AddStructureDifferences(f, m, &diff);
  return diff;
}

// The model shape of `file` against the config's, as one error naming both.
Status CheckModelShape(hid_t file_id, const std::string& file, const ModelConfig& model) {
  const std::string diff = ShapeDifferences(file_id, model);
  if (diff.empty()) return Status::Ok();
  return CheckpointError(
      StrFormat("checkpoint does not match the model in the config (%s): %s. Set the config's "
                "Model keys to the checkpoint's (h5dump -a /config %s shows its config)",
                file.c_str(), diff.c_str(), file.c_str()));
}

// Whether `file` holds what `params` asks for: LoRA adapters (a `lora_base` attribute) where they
// are adapters, a model's weights where they are weights; else one error saying which and what
// to do instead.
Status CheckWeightKind(hid_t file_id, const std::string& file, const ModelConfig& config,
                       const std::vector<ParameterInfo>& params) {
  const bool wants_adapters = std::any_of(params.begin(), params.end(), [](const ParameterInfo& p) {
    return p.role == ParamRole::kLoraA || p.role == ParamRole::kLoraB;
  });
  std::string base;
  const bool has_adapters = H5Aexists(file_id, "lora_base") > 0 &&
                            Hdf5ReadStringAttribute(file_id, "lora_base", &base).ok();
  if (has_adapters && !wants_adapters && config.lora())  // read as a LoRA run's base
    return CheckpointError(StrFormat(
        "%s holds LoRA adapters (of %s), not a model's weights, and a LoRA run's base "
        "(Checkpoint.init_from) must be weights. Merge them into their base with `trainer export "
        "--lora merge` and give that folder as Checkpoint.init_from, or start from their own base",
        file.c_str(), base.c_str()));
  if (has_adapters && !wants_adapters)
    return CheckpointError(StrFormat(
        "%s holds LoRA adapters (of %s), not a model's weights, and the config has no adapters "
        "(Model.lora_rank=0). Merge them into their base with `trainer export --lora merge` and "
        "start from that, or resume the LoRA run with its Model.lora_rank",
        file.c_str(), base.c_str()));
  if (!has_adapters && wants_adapters)
    return CheckpointError(StrFormat(
        "%s holds a model's weights, not LoRA adapters, and the config trains adapters "
        "(Model.lora_rank > 0). Resume it with Model.lora_rank=0 (and the other Model.lora_* "
        "keys at their defaults), or start a LoRA run on it as "
        "the base: Checkpoint.init_from=%s and a Checkpoint.dir of its own",
        file.c_str(), file.c_str()));
  return Status::Ok();
}

// Every tensor under the file's /model has a place in `config`'s model (its trained parameters
// or, with LoRA, its base weights); else one error naming the first that has none.
Status CheckNoExtraTensors(hid_t file_id, const std::string& file, const ModelConfig& config) {
  std::set<std::string> known;
  for (const ParameterInfo& p : FullParameterList(config)) known.insert(p.name);
  for (const ParameterInfo& p : FullBaseParameterList(config)) known.insert(p.name);
  std::vector<std::string> tensors;
  TRAINER_RETURN_IF_ERROR(ListTensors(file_id, file, &tensors));
  std::vector<std::string> extra;
  for (const std::string& path : tensors)
    if (path.rfind("model/", 0) == 0 && known.count(path.substr(6)) == 0) extra.push_back(path);
  if (extra.empty()) return Status::Ok();
  std::vector<int64_t> shape;
  (void)DatasetShape(file_id, extra.front(), &shape);
  return CheckpointError(StrFormat(
      "%s holds /%s %s%s, which the config's model has no place for. Set the config's Model "
      "keys to the checkpoint's (h5dump -a /config %s shows its config)",
      file.c_str(), extra.front().c_str(), ShapeText(shape).c_str(),
      extra.size() > 1 ? StrFormat(" (and %zu more)", extra.size() - 1).c_str() : "",
      file.c_str()));
}

}  // namespace

// The checks of a checkpoint's weights against the config's model before they are read.
Status CheckWeightsFit(hid_t file_id, const std::string& file, const ModelConfig& config,
                       const std::vector<ParameterInfo>& params) {
  TRAINER_RETURN_IF_ERROR(CheckWeightKind(file_id, file, config, params));
  TRAINER_RETURN_IF_ERROR(CheckModelShape(file_id, file, config));
  return CheckNoExtraTensors(file_id, file, config);
}

}  // namespace trainer
