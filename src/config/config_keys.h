// The configuration key table (internal to src/config/): every "Section.key" with the TrainConfig
// field it sets, in the order FormatConfig prints them; typed parsing of one YAML value into a
// field and formatting of a field back to YAML text.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "config/train_config.h"

namespace YAML {
class Node;
}

namespace trainer {

// A pointer to one field of a TrainConfig; the alternative says the key's type.
using FieldRef = std::variant<int*, uint64_t*, double*, bool*, std::string*, std::vector<int>*>;

struct ConfigKey {
  const char* section;                     // "Model"
  const char* name;                        // "hidden_size"
  FieldRef (*field)(TrainConfig& config);  // the field this key sets in `config`
  std::string full_name() const { return std::string(section) + "." + name; }
};

// Every key, sections in file order (Global, Model, Distributed, Engine, Optimizer, Data,
// Checkpoint), keys in struct order. Aliases are not listed.
const std::vector<ConfigKey>& ConfigKeyTable();
// The section names, in order.
const std::vector<std::string>& ConfigSectionNames();
// The key named section.name, resolving aliases (Distributed.mp_degree -> tp_degree); nullptr
// when there is none.
const ConfigKey* FindConfigKey(const std::string& section, const std::string& name);
// "Section.key" with aliases resolved ("Distributed.mp_degree" -> "Distributed.tp_degree");
// unchanged when unknown.
std::string CanonicalKeyName(const std::string& full_name);
// The key names of one section, or of all sections as "Section.key" when `section` is empty.
std::vector<std::string> ConfigKeyNames(const std::string& section);

// Parses `value` into `field`. `key` ("Model.hidden_size") and `where` ("configs/x.yaml line 7"
// or "from -o Model.hidden_size=abc") name the value in the error:
// `Model.hidden_size must be an integer, got "abc" (configs/x.yaml line 7)`.
Status ParseField(const FieldRef& field, const YAML::Node& value, const std::string& key,
                  const std::string& where);

// The field as YAML text that ParseField reads back to the same value.
std::string FormatField(const FieldRef& field);

}  // namespace trainer
