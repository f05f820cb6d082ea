// Configuration loading: a YAML file plus `-o Section.key=value` overrides -> TrainConfig;
// validation against the world size (deriving dp_degree); the resolved config as YAML text.
// Every error is a UsageError (exit code 2) naming the key, where it came from and the fix.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/train_config.h"

namespace trainer {

// Defaults, then the YAML file at `yaml_path` (skipped when empty), then each override in order.
// An override is "Section.key=value", the value parsed as a YAML scalar or flow sequence
// ("Distributed.pp_layers=[3,2]"). Keys are case-sensitive; Distributed.mp_degree is an alias of
// Distributed.tp_degree. Unknown keys, wrong types and malformed YAML are errors.
StatusOr<TrainConfig> LoadConfig(const std::string& yaml_path,
                                 const std::vector<std::string>& overrides);
// As LoadConfig, from YAML text (e.g. the resolved config a checkpoint carries) that `source`
// names in errors; empty `source`: defaults and overrides only.
StatusOr<TrainConfig> LoadConfigText(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides);

// Sets config->world_size, derives dp_degree when it is 0 (world / (tp * pp)), then checks every
// rule of docs/config.md (degrees vs the world size, batch divisibility, model shapes vs the
// degrees, value ranges, enumerations). Returns the first violation.
Status ValidateConfig(TrainConfig* config, int world_size);

// The resolved config as YAML: every section and key in a stable order (that of AllConfigKeys).
// LoadConfig of a file holding this text gives the same config back.
std::string FormatConfig(const TrainConfig& config);

// Every key as "Section.key", in FormatConfig's order (aliases excluded).
std::vector<std::string> AllConfigKeys();

}  // namespace trainer
