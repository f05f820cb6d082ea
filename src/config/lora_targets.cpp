// Model.lora_targets parsing (lora_targets.h).
#include "config/lora_targets.h"

#include <algorithm>
#include <sstream>

namespace trainer {
namespace {

const std::vector<std::string> kLlamaTargets = {"q", "k", "v", "o", "gate", "up", "down"};
const std::vector<std::string> kGpt2Targets = {"c_attn", "c_proj", "c_fc"};

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::string PeftModuleName(const std::string& target) {
  const bool gpt2 =
      std::find(kGpt2Targets.begin(), kGpt2Targets.end(), target) != kGpt2Targets.end();
  return gpt2 ? target : target + "_proj";
}

bool ParseLoraTargets(const ModelConfig& model, std::vector<std::string>* targets,
                      std::string* error) {
  const std::vector<std::string>& names = model.arch == "llama" ? kLlamaTargets : kGpt2Targets;
  std::vector<bool> chosen(names.size(), false);
  std::stringstream list(model.lora_targets);
  std::string item;
  bool any = false;
  while (std::getline(list, item, ',')) {
    item = Trim(item);
    if (item.empty()) continue;
    any = true;
    if (item == "all" || item == "all-linear") {
      std::fill(chosen.begin(), chosen.end(), true);
      continue;
    }
    size_t i = 0;
    while (i < names.size() && item != names[i] && item != PeftModuleName(names[i])) ++i;
    if (i == names.size()) {
      std::string valid;
      for (const std::string& n : names) valid += (valid.empty() ? "" : ", ") + n;
      *error = "\"" + item + "\" is not a linear layer of Model.arch=" + model.arch +
               " (valid: " + valid + ", or all)";
      return false;
    }
    chosen[i] = true;
  }
  if (!any) {
    *error = "names no layer";
    return false;
  }
  targets->clear();
  for (size_t i = 0; i < names.size(); ++i)
    if (chosen[i]) targets->push_back(names[i]);
  return true;
}

}  // namespace trainer
