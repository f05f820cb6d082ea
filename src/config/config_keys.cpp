// The configuration key table and typed value parsing/formatting (see config_keys.h).
#include "config/config_keys.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "common/log.h"

namespace trainer {
namespace {

// One table row: the key Section.field sets config.member.field.
#define CONFIG_KEY(Section, member, field)                                        \
  ConfigKey {                                                                     \
#Section, #field, [](TrainConfig & c) -> FieldRef { return &c.member.field; } \
  }

// A key of a nested map: Section.sub.field sets config.member.sub.field.
#define CONFIG_SUBKEY(Section, member, sub, field)                                             \
  ConfigKey {                                                                                  \
#Section, #sub "." #field, [](TrainConfig & c) -> FieldRef { return &c.member.sub.field; } \
  }

const std::vector<ConfigKey> kKeys = {
    CONFIG_KEY(Global, global, seed),
    CONFIG_KEY(Global, global, global_batch_size),
    CONFIG_KEY(Global, global, micro_batch_size),
    CONFIG_KEY(Global, global, device),

    CONFIG_KEY(Model, model, arch),
    CONFIG_KEY(Model, model, vocab_size),
    CONFIG_KEY(Model, model, vocab_pad_multiple),
    CONFIG_KEY(Model, model, hidden_size),
    CONFIG_KEY(Model, model, num_layers),
    CONFIG_KEY(Model, model, num_heads),
    CONFIG_KEY(Model, model, ffn_hidden_size),
    CONFIG_KEY(Model, model, max_seq_len),
    CONFIG_KEY(Model, model, seq_len),
    CONFIG_KEY(Model, model, recompute),
    CONFIG_KEY(Model, model, sequence_parallel),
    CONFIG_KEY(Model, model, loss_chunk_tokens),
    CONFIG_KEY(Model, model, num_kv_heads),
    CONFIG_KEY(Model, model, head_dim),
    CONFIG_KEY(Model, model, norm_eps),
    CONFIG_KEY(Model, model, rope_theta),
    CONFIG_KEY(Model, model, rope_scaling),
    CONFIG_KEY(Model, model, rope_factor),
    CONFIG_KEY(Model, model, rope_low_freq_factor),
    CONFIG_KEY(Model, model, rope_high_freq_factor),
    CONFIG_KEY(Model, model, rope_original_max_positions),
    CONFIG_KEY(Model, model, qkv_bias),
    CONFIG_KEY(Model, model, qk_norm),
    CONFIG_KEY(Model, model, qk_norm_type),
    CONFIG_KEY(Model, model, tie_embeddings),
    CONFIG_KEY(Model, model, num_experts),
    CONFIG_KEY(Model, model, moe_router_topk),
    CONFIG_KEY(Model, model, moe_ffn_hidden_size),
    CONFIG_KEY(Model, model, moe_shared_expert_intermediate_size),
    CONFIG_KEY(Model, model, moe_layer_freq),
    CONFIG_KEY(Model, model, moe_first_k_dense),
    CONFIG_KEY(Model, model, moe_router_score_function),
    CONFIG_KEY(Model, model, moe_router_pre_softmax),
    CONFIG_KEY(Model, model, moe_norm_topk_prob),
    CONFIG_KEY(Model, model, moe_aux_loss_coeff),
    CONFIG_KEY(Model, model, moe_router_load_balancing_type),
    CONFIG_KEY(Model, model, moe_z_loss_coeff),
    CONFIG_KEY(Model, model, moe_expert_capacity_factor),
    CONFIG_KEY(Model, model, moe_router_bias_update_rate),
    CONFIG_KEY(Model, model, bias),
    CONFIG_KEY(Model, model, hidden_dropout),
    CONFIG_KEY(Model, model, attention_dropout),
    CONFIG_KEY(Model, model, lora_rank),
    CONFIG_KEY(Model, model, lora_alpha),
    CONFIG_KEY(Model, model, lora_dropout),
    CONFIG_KEY(Model, model, lora_targets),

    CONFIG_KEY(Distributed, distributed, dp_degree),
    CONFIG_KEY(Distributed, distributed, tp_degree),
    CONFIG_KEY(Distributed, distributed, pp_degree),
    CONFIG_KEY(Distributed, distributed, ep_degree),
    CONFIG_KEY(Distributed, distributed, pp_layers),
    CONFIG_KEY(Distributed, distributed, zero_stage1),
    CONFIG_KEY(Distributed, distributed, overlap_grad_reduce),
    CONFIG_KEY(Distributed, distributed, gpu_collectives),
    CONFIG_SUBKEY(Distributed, distributed, sharding, sharding_degree),
    CONFIG_SUBKEY(Distributed, distributed, sharding, sharding_stage),
    CONFIG_SUBKEY(Distributed, distributed, sharding, sharding_offload),
    CONFIG_SUBKEY(Distributed, distributed, sharding, reduce_overlap),
    CONFIG_SUBKEY(Distributed, distributed, sharding, broadcast_overlap),

    CONFIG_KEY(Engine, engine, max_steps),
    CONFIG_KEY(Engine, engine, logging_freq),
    CONFIG_KEY(Engine, engine, eval_freq),
    CONFIG_KEY(Engine, engine, eval_iters),
    CONFIG_KEY(Engine, engine, save_steps),
    CONFIG_KEY(Engine, engine, output_dir),
    CONFIG_KEY(Engine, engine, mix_precision),
    CONFIG_KEY(Engine, engine, watchdog_s),
    CONFIG_KEY(Engine, engine, tensorboard),
    CONFIG_KEY(Engine, engine, profile),
    CONFIG_KEY(Engine, engine, peak_tflops),
    CONFIG_KEY(Engine, engine, exit_duration_min),
    CONFIG_KEY(Engine, engine, gpu_routes),

    CONFIG_KEY(Optimizer, optimizer, lr),
    CONFIG_KEY(Optimizer, optimizer, min_lr),
    CONFIG_KEY(Optimizer, optimizer, warmup_steps),
    CONFIG_KEY(Optimizer, optimizer, decay_steps),
    CONFIG_KEY(Optimizer, optimizer, decay_style),
    CONFIG_KEY(Optimizer, optimizer, weight_decay),
    CONFIG_KEY(Optimizer, optimizer, beta1),
    CONFIG_KEY(Optimizer, optimizer, beta2),
    CONFIG_KEY(Optimizer, optimizer, eps),
    CONFIG_KEY(Optimizer, optimizer, grad_clip),
    CONFIG_KEY(Optimizer, optimizer, store_param_remainders),

    CONFIG_KEY(Data, data, train_path),
    CONFIG_KEY(Data, data, train_weights),
    CONFIG_KEY(Data, data, val_path),
    CONFIG_KEY(Data, data, val_fraction),
    CONFIG_KEY(Data, data, shift_windows),
    CONFIG_KEY(Data, data, packing),

    CONFIG_KEY(Checkpoint, checkpoint, dir),
    CONFIG_KEY(Checkpoint, checkpoint, keep_last),
    CONFIG_KEY(Checkpoint, checkpoint, keep_every),
    CONFIG_KEY(Checkpoint, checkpoint, resume),
    CONFIG_KEY(Checkpoint, checkpoint, init_from),
    CONFIG_KEY(Checkpoint, checkpoint, async_save),
};

#undef CONFIG_KEY
#undef CONFIG_SUBKEY

// Alternative spellings: {section, alias, canonical name}.
struct KeyAlias {
  const char* section;
  const char* alias;
  const char* name;
};
const KeyAlias kAliases[] = {{"Distributed", "mp_degree", "tp_degree"}};

// How a value that is not what the key wants reads in a message.
std::string Describe(const YAML::Node& value) {
  if (!value.IsDefined() || value.IsNull()) return "an empty value";
  if (value.IsSequence()) return "a list";
  if (value.IsMap()) return "a map";
  return "\"" + value.Scalar() + "\"";
}

Status TypeError(const std::string& key, const char* wanted, const YAML::Node& value,
                 const std::string& where) {
  return UsageError(key + " must be " + wanted + ", got " + Describe(value) + " (" + where +
                    "). docs/config.md gives each key's type and default");
}

// Whole-string conversions: no leading or trailing characters, no overflow. Integers as YAML
// 1.2's core schema writes them: decimal (a leading 0 too), 0x hexadecimal, 0o octal.
int IntegerBase(const std::string& s, size_t* digits) {
  const bool prefixed = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o');
  *digits = prefixed ? 2 : 0;
  return !prefixed ? 10 : s[1] == 'x' ? 16 : 8;
}
bool ToLongLong(const std::string& s, long long* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  size_t at = 0;
  const int base = IntegerBase(s, &at);
  if (base != 10 && !std::isxdigit(static_cast<unsigned char>(s[at]))) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtoll(s.c_str() + at, &end, base);
  return errno == 0 && *end == '\0';
}
bool ToUint64(const std::string& s, uint64_t* out) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  size_t at = 0;
  const int base = IntegerBase(s, &at);
  if (base != 10 && !std::isxdigit(static_cast<unsigned char>(s[at]))) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtoull(s.c_str() + at, &end, base);
  return errno == 0 && *end == '\0';
}
bool ToDouble(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);  // an underflow (1e-310) is the nearest double, finite
  return *end == '\0' && std::isfinite(*out);
}
bool ToBool(const std::string& s, bool* out) {
  static const char* const kTrue[] = {"true", "True", "TRUE", "yes", "Yes",
                                      "YES",  "on",   "On",   "ON"};
  static const char* const kFalse[] = {"false", "False", "FALSE", "no", "No",
                                       "NO",    "off",   "Off",   "OFF"};
  for (const char* t : kTrue)
    if (s == t) return (*out = true, true);
  for (const char* f : kFalse)
    if (s == f) return (*out = false, true);
  return false;
}

Status ParseInt(const YAML::Node& value, const std::string& key, const std::string& where,
                int* out) {
  long long v = 0;
  if (!value.IsScalar() || !ToLongLong(value.Scalar(), &v))
    return TypeError(key, "an integer", value, where);
  if (v < INT_MIN || v > INT_MAX)
    return TypeError(key, "an integer in [-2147483648, 2147483647]", value, where);
  *out = static_cast<int>(v);
  return Status::Ok();
}

// YAML double-quoted string: backslash escapes for quotes, backslashes and control characters.
std::string QuoteString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch < 0x20 || ch == 0x7f) {
      out += StrFormat("\\x%02x", ch);
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

// The shortest text that reads back as exactly `v`, with a '.' so that YAML 1.1 readers
// (PyYAML) see a float too: 0.0003, 1.0e-08, 3.0.
std::string FormatDouble(double v) {
  std::string text;
  for (int precision = 1; precision <= 17; ++precision) {
    text = StrFormat("%.*g", precision, v);
    if (std::strtod(text.c_str(), nullptr) == v) break;
  }
  if (text.find_first_of(".ni") != std::string::npos) return text;  // has a point, inf or nan
  size_t exponent = text.find('e');
  if (exponent == std::string::npos) return text + ".0";
  return text.substr(0, exponent) + ".0" + text.substr(exponent);
}

// std::visit helper: one lambda per alternative.
template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace

const std::vector<ConfigKey>& ConfigKeyTable() {
  return kKeys;
}

const std::vector<std::string>& ConfigSectionNames() {
  static const std::vector<std::string> sections = [] {
    std::vector<std::string> names;
    for (const ConfigKey& key : kKeys)
      if (names.empty() || names.back() != key.section) names.push_back(key.section);
    return names;
  }();
  return sections;
}

const ConfigKey* FindConfigKey(const std::string& section, const std::string& name) {
  std::string canonical = name;
  for (const KeyAlias& alias : kAliases)
    if (section == alias.section && name == alias.alias) canonical = alias.name;
  for (const ConfigKey& key : kKeys)
    if (section == key.section && canonical == key.name) return &key;
  return nullptr;
}

std::string CanonicalKeyName(const std::string& full_name) {
  size_t dot = full_name.find('.');
  if (dot == std::string::npos) return full_name;
  const ConfigKey* key = FindConfigKey(full_name.substr(0, dot), full_name.substr(dot + 1));
  return key ? key->full_name() : full_name;
}

std::vector<std::string> ConfigKeyNames(const std::string& section) {
  std::vector<std::string> names;
  for (const ConfigKey& key : kKeys) {
    if (section.empty())
      names.push_back(key.full_name());
    else if (section == key.section)
      names.push_back(key.name);
  }
  return names;
}

Status ParseField(const FieldRef& field, const YAML::Node& value, const std::string& key,
                  const std::string& where) {
  const bool is_null = value.IsNull();
  return std::visit(Overloaded{
                        [&](int* out) { return ParseInt(value, key, where, out); },
                        [&](uint64_t* out) {
                          if (!value.IsScalar() || !ToUint64(value.Scalar(), out))
                            return TypeError(key, "a non-negative integer", value, where);
                          return Status::Ok();
                        },
                        [&](double* out) {
                          if (!value.IsScalar() || !ToDouble(value.Scalar(), out))
                            return TypeError(key, "a finite number", value, where);
                          return Status::Ok();
                        },
                        [&](bool* out) {
                          if (!value.IsScalar() || !ToBool(value.Scalar(), out))
                            return TypeError(key, "true or false", value, where);
                          return Status::Ok();
                        },
                        [&](std::string* out) {
                          if (is_null) {
                            out->clear();  // `key:` with nothing after it, or null/~
                            return Status::Ok();
                          }
                          if (!value.IsScalar()) return TypeError(key, "a string", value, where);
                          *out = value.Scalar();
                          return Status::Ok();
                        },
                        [&](std::vector<int>* out) {
                          if (is_null) {
                            out->clear();
                            return Status::Ok();
                          }
                          if (!value.IsSequence())
                            return TypeError(key, "a list of integers such as [3, 2]", value,
                                             where);
                          std::vector<int> parsed(value.size());
                          for (size_t i = 0; i < value.size(); ++i) {
                            std::string element = key + "[" + std::to_string(i) + "]";
                            TRAINER_RETURN_IF_ERROR(ParseInt(value[i], element, where, &parsed[i]));
                          }
                          *out = std::move(parsed);
                          return Status::Ok();
                        },
                    },
                    field);
}

std::string FormatField(const FieldRef& field) {
  return std::visit(Overloaded{
                        [](int* v) { return std::to_string(*v); },
                        [](uint64_t* v) { return std::to_string(*v); },
                        [](double* v) { return FormatDouble(*v); },
                        [](bool* v) { return std::string(*v ? "true" : "false"); },
                        [](std::string* v) { return QuoteString(*v); },
                        [](std::vector<int>* v) {
                          std::string text = "[";
                          for (size_t i = 0; i < v->size(); ++i)
                            text += (i ? ", " : "") + std::to_string((*v)[i]);
                          return text + "]";
                        },
                    },
                    field);
}

}  // namespace trainer
