// Checker: how ValidateConfig (config_validate.cpp, config_validate_model.cpp) reads keys by name
// and words each violation as one UsageError line: `<key>=<value> <problem> (<where it was set>).
// <fix>.` Internal to src/config/.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/config_keys.h"
#include "config/config_loader.h"

namespace trainer {

inline std::string Join(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i < items.size(); ++i) text += (i ? ", " : "") + items[i];
  return text;
}

// Reads keys of one config by name and words the errors about them.
class Checker {
 public:
  explicit Checker(TrainConfig* config) : config_(config) {}

  // The field of "Section.key" (nullptr only for a misspelt name in this file: a bug).
  const FieldRef* Field(const std::string& full_name) {
    size_t dot = full_name.find('.');
    const ConfigKey* key = FindConfigKey(full_name.substr(0, dot), full_name.substr(dot + 1));
    if (key == nullptr) return nullptr;
    field_ = key->field(*config_);
    return &field_;
  }

  // "Model.hidden_size=130", "Global.device=\"gpu\"".
  std::string Show(const std::string& key) { return key + "=" + Value(key); }
  std::string Value(const std::string& key) { return FormatField(*Field(key)); }

  // Where the first of `keys` that an override set came from ("from -o Model.hidden_size=130",
  // the last such override), else the config file, else "built-in defaults".
  std::string Where(std::initializer_list<std::string> keys) const {
    const std::vector<std::string>& overrides = config_->config_overrides;
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
      std::string name = it->substr(0, it->find('='));
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      for (const std::string& key : keys)
        if (CanonicalKeyName(name) == key) return "from -o " + *it;
    }
    return config_->config_path.empty() ? "built-in defaults" : config_->config_path;
  }

  // "<what> (<where>). <fix>."
  Status Fail(const std::string& what, std::initializer_list<std::string> keys,
              const std::string& fix) const {
    return UsageError(what + " (" + Where(keys) + "). " + fix + ".");
  }

 private:
  TrainConfig* config_;
  FieldRef field_;
};

// The model's shape and keys that do not depend on the parallel layout (config_validate_model.cpp).
Status CheckModel(const TrainConfig& c, Checker& check);

}  // namespace trainer
