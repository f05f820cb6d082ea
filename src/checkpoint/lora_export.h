// `trainer export --lora merge|adapter` of a LoRA checkpoint (one that holds adapters only and
// names its base, checkpoint-format.md): the adapters merged into the base's weights, W + (alpha /
// r) B A, for a full Hugging Face model; or a PEFT adapter folder, adapter_config.json (r,
// lora_alpha, lora_dropout, target_modules, ...) and adapter_model.safetensors with PEFT's keys
// (base_model.model.<the parameter's name>, e.g.
// base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight), which
// peft.PeftModel.from_pretrained loads onto the base model.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "config/train_config.h"

namespace trainer {

// The whole base model of `config` (Checkpoint.init_from, or Global.seed's initialisation) with
// the adapters of the checkpoint `file` merged in, in FullBaseParameterList's buffer order.
Status MergedLoraWeights(const TrainConfig& config, const std::string& file,
                         std::vector<float>* flat);

// The PEFT adapter folder's two files, as text and tensors.
Status PeftAdapter(const TrainConfig& config, const std::string& file, std::string* config_json,
                   std::vector<SafetensorsTensor>* tensors);

}  // namespace trainer
