// LoRA export (lora_export.h).
#include "checkpoint/lora_export.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained.h"
#include "common/log.h"
#include "config/lora_targets.h"
#include "model/parameters.h"

namespace trainer {
namespace {

ModelPartition Whole(const ModelConfig& model) {
  ModelPartition whole;
  whole.num_layers = model.num_layers;
  return whole;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Status MergedLoraWeights(const TrainConfig& config, const std::string& file,
                         std::vector<float>* flat) {
  TRAINER_RETURN_IF_ERROR(CheckLoraBase(file, config));
  const ModelConfig& m = config.model;
  const ModelPartition whole = Whole(m);
  const std::vector<ParameterInfo> base = FullBaseParameterList(m);
  if (config.checkpoint.init_from.empty()) {
    *flat = InitialParameterValues(m, whole, base, config.global.seed);
  } else {
    std::string what;
    TRAINER_RETURN_IF_ERROR(
        PretrainedParameterValues(config.checkpoint.init_from, m, whole, base, flat, &what));
  }
  const std::vector<ParameterInfo> adapters = FullParameterList(m);
  std::vector<float> ab;
  TRAINER_RETURN_IF_ERROR(ReadCheckpointWeights(file, m, adapters, whole, &ab));
  const ModelSpec spec = MakeModelSpec(m);
  const double scale = m.lora_alpha / m.lora_rank;
  const int64_t r = m.lora_rank;
  for (const ParameterInfo& a : adapters) {
    if (a.role != ParamRole::kLoraA) continue;
    const ParameterInfo* b = nullptr;
    for (const ParameterInfo& p : adapters)
      if (p.role == ParamRole::kLoraB && p.layer == a.layer && p.lora_base == a.lora_base) b = &p;
    const std::string name = ParameterName(spec, a.lora_base, a.layer);
    const ParameterInfo* w = nullptr;
    for (const ParameterInfo& p : base)
      if (p.name == name) w = &p;
    if (b == nullptr || w == nullptr)
      return RuntimeError("LoRA export: no B or base weight for " + a.name);
    const int64_t out = w->full_shape[0], in = w->full_shape[1];
    // W (out, in) += scale * B (out, r) A (r, in), in double.
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double sum = 0;
        for (int64_t k = 0; k < r; ++k)
          sum += static_cast<double>(ab[b->offset + o * r + k]) * ab[a.offset + k * in + i];
        (*flat)[w->offset + o * in + i] += static_cast<float>(scale * sum);
      }
  }
  return Status::Ok();
}

Status PeftAdapter(const TrainConfig& config, const std::string& file, std::string* config_json,
                   std::vector<SafetensorsTensor>* tensors) {
  // The adapter names its base, whose weights it never reads: a base that is there must be the
  // one the adapters were trained on, but one that is not (another machine) is no obstacle.
  if (config.checkpoint.init_from.empty() || PathExists(config.checkpoint.init_from))
    TRAINER_RETURN_IF_ERROR(CheckLoraBase(file, config));
  const ModelConfig& m = config.model;
  const std::vector<ParameterInfo> adapters = FullParameterList(m);
  std::vector<float> flat;
  TRAINER_RETURN_IF_ERROR(ReadCheckpointWeights(file, m, adapters, Whole(m), &flat));
  tensors->clear();
  for (const ParameterInfo& p : adapters) {
    SafetensorsTensor t;
    t.name = "base_model.model." + p.name;
    t.shape = p.full_shape;
    t.values.assign(flat.begin() + static_cast<int64_t>(p.offset),
                    flat.begin() + static_cast<int64_t>(p.offset) + p.full_numel());
    tensors->push_back(std::move(t));
  }
  std::vector<std::string> targets;
  std::string error;
  if (!ParseLoraTargets(m, &targets, &error)) return UsageError("Model.lora_targets: " + error);
  std::string modules;
  for (const std::string& t : targets)
    modules += (modules.empty() ? "" : ", ") + JsonString(PeftModuleName(t));
  // GPT-2's Conv1D layers store (in, out): PEFT's fan_in_fan_out.
  const bool gpt2 = m.arch != "llama";
  *config_json = StrFormat(
      "{\n"
      "  \"base_model_name_or_path\": %s,\n"
      "  \"bias\": \"none\",\n"
      "  \"fan_in_fan_out\": %s,\n"
      "  \"inference_mode\": true,\n"
      "  \"init_lora_weights\": true,\n"
      "  \"lora_alpha\": %.17g,\n"
      "  \"lora_dropout\": %.17g,\n"
      "  \"modules_to_save\": null,\n"
      "  \"peft_type\": \"LORA\",\n"
      "  \"r\": %d,\n"
      "  \"target_modules\": [%s],\n"
      "  \"task_type\": \"CAUSAL_LM\",\n"
      "  \"use_rslora\": false\n"
      "}\n",
      JsonString(config.checkpoint.init_from).c_str(), gpt2 ? "true" : "false", m.lora_alpha,
      m.lora_dropout, m.lora_rank, modules.c_str());
  return Status::Ok();
}

}  // namespace trainer
