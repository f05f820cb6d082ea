// Model.lora_targets: which linears of each block carry a LoRA adapter. The names are the
// trainer's short ones (q, k, v, o, gate, up, down; GPT-2's c_attn, c_proj, c_fc) or PEFT's
// target_modules spellings of them (q_proj ... down_proj); "all" is every linear of the family.
#pragma once

#include <string>
#include <vector>

#include "config/train_config.h"

namespace trainer {

// The targets of `model` in the family's canonical order (llama: q, k, v, o, gate, up, down;
// gpt2: c_attn, c_proj, c_fc), each once. On a name the family does not have: false, and
// *error names it and lists the valid ones.
bool ParseLoraTargets(const ModelConfig& model, std::vector<std::string>* targets,
                      std::string* error);

// The Hugging Face module name of a canonical target (PEFT's target_modules): "q" -> "q_proj".
std::string PeftModuleName(const std::string& target);

}  // namespace trainer
