// The llama family's Hugging Face config.json and weights (hf_llama.h).
#include "checkpoint/hf_llama.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/hf_moe.h"
#include "checkpoint/safetensors.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"

namespace trainer {
namespace {

const char kSupported[] =
    "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen2MoeForCausalLM, "
    "MixtralForCausalLM, OlmoeForCausalLM, Qwen3MoeForCausalLM, GPT2LMHeadModel";

Status ReadRope(const ConfigReader& r, const YAML::Node& root, const std::string& arch,
                ModelConfig* m) {
  // transformers 5: rope_parameters {rope_type, rope_theta, ...}; 4: rope_theta beside
  // rope_scaling {rope_type or type, ...} (null for the default).
  const YAML::Node v5 = root["rope_parameters"];
  const bool is_v5 = v5 && !v5.IsNull();
  const YAML::Node rope = is_v5 ? v5 : root["rope_scaling"];
  m->rope_theta = arch == "MixtralForCausalLM" ? 1e6 : 10000.0;  // transformers' defaults
  TRAINER_RETURN_IF_ERROR(r.Get("rope_theta", &m->rope_theta));
  // RoPE over a part of each head (transformers 4 reads the key beside, 5 inside the object).
  double partial = 1;
  TRAINER_RETURN_IF_ERROR(r.Get("partial_rotary_factor", &partial));
  if (rope && rope.IsMap()) TRAINER_RETURN_IF_ERROR(r.Get("partial_rotary_factor", &partial, rope));
  if (partial != 1)
    return r.Refuse(StrFormat(
        "partial_rotary_factor %g is not supported (RoPE rotates every dimension of a head here)",
        partial));
  m->rope_scaling = "none";
  if (!rope || rope.IsNull()) return Status::Ok();
  if (!rope.IsMap()) return r.Refuse("rope_scaling / rope_parameters is not an object");
  // transformers 4 takes rope_theta from beside rope_scaling only; 5 from inside rope_parameters.
  double theta = m->rope_theta;
  TRAINER_RETURN_IF_ERROR(r.Get("rope_theta", &theta, rope));
  if (is_v5) m->rope_theta = theta;
  if (!is_v5 && theta != m->rope_theta)
    return r.Refuse(StrFormat(
        "rope_scaling holds rope_theta %s and the top level %s: transformers 4 takes the top "
        "level's, 5 the object's. Make them agree",
        Decimal(theta).c_str(), Decimal(m->rope_theta).c_str()));
  // transformers 4 takes "type" over "rope_type", 5 "rope_type": where both differ, refused.
  std::string legacy_type, rope_type;
  TRAINER_RETURN_IF_ERROR(r.Get("type", &legacy_type, rope));
  TRAINER_RETURN_IF_ERROR(r.Get("rope_type", &rope_type, rope));
  if (!legacy_type.empty() && !rope_type.empty() && legacy_type != rope_type)
    return r.Refuse(
        StrFormat("rope_scaling's type %s and rope_type %s differ (transformers 4 takes type, 5 "
                  "rope_type): make them agree",
                  legacy_type.c_str(), rope_type.c_str()));
  const std::string type = !rope_type.empty()     ? rope_type
                           : !legacy_type.empty() ? legacy_type
                                                  : "default";
  if (type == "default") return Status::Ok();
  if (type != "llama3")
    return r.Refuse(StrFormat("%s's rope type %s is not supported (default and llama3 are)",
                              arch.c_str(), type.c_str()));
  m->rope_scaling = "llama3";
  const char* keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                        "original_max_position_embeddings"};
  for (const char* key : keys)
    if (!rope[key] || rope[key].IsNull())
      return r.Refuse(StrFormat("the llama3 rope scaling lacks %s", key));
  TRAINER_RETURN_IF_ERROR(r.Get("factor", &m->rope_factor, rope));
  TRAINER_RETURN_IF_ERROR(r.Get("low_freq_factor", &m->rope_low_freq_factor, rope));
  TRAINER_RETURN_IF_ERROR(r.Get("high_freq_factor", &m->rope_high_freq_factor, rope));
  return r.Get("original_max_position_embeddings", &m->rope_original_max_positions, rope);
}

// Where the config's model differs from the pretrained one: "Model.key is A, the pretrained
// model's B", or "".
std::string Difference(const ModelConfig& a, const ModelConfig& b) {
  auto close = [](double x, double y) { return std::fabs(x - y) <= 1e-9 * std::fabs(y); };
  auto text = [](bool v) { return std::string(v ? "true" : "false"); };
  std::vector<std::tuple<const char*, std::string, std::string>> keys = {
      {"arch", a.arch, b.arch},
      {"vocab_size", std::to_string(a.vocab_size), std::to_string(b.vocab_size)},
      {"hidden_size", std::to_string(a.hidden_size), std::to_string(b.hidden_size)},
      {"num_layers", std::to_string(a.num_layers), std::to_string(b.num_layers)},
      {"num_heads", std::to_string(a.num_heads), std::to_string(b.num_heads)},
      {"num_kv_heads", std::to_string(a.kv_heads()), std::to_string(b.kv_heads())},
      {"head_dim", std::to_string(a.head_size()), std::to_string(b.head_size())},
      {"ffn_hidden_size", std::to_string(a.ffn_size()), std::to_string(b.ffn_size())},
      {"qkv_bias", text(a.qkv_bias), text(b.qkv_bias)},
      {"qk_norm", text(a.qk_norm), text(b.qk_norm)},
      {"qk_norm_type", a.qk_norm ? a.qk_norm_type : "head", b.qk_norm ? b.qk_norm_type : "head"},
      {"tie_embeddings", text(a.tie_embeddings), text(b.tie_embeddings)},
      {"rope_scaling", a.rope_scaling, b.rope_scaling}};
  for (const auto& [key, x, y] : keys)
    if (x != y)
      return StrFormat("Model.%s is %s, the pretrained model's %s", key, x.c_str(), y.c_str());
  std::vector<std::tuple<const char*, double, double>> numbers = {
      {"norm_eps", a.norm_eps, b.norm_eps}, {"rope_theta", a.rope_theta, b.rope_theta}};
  if (b.rope_scaling == "llama3") {
    numbers.emplace_back("rope_factor", a.rope_factor, b.rope_factor);
    numbers.emplace_back("rope_low_freq_factor", a.rope_low_freq_factor, b.rope_low_freq_factor);
    numbers.emplace_back("rope_high_freq_factor", a.rope_high_freq_factor, b.rope_high_freq_factor);
    numbers.emplace_back("rope_original_max_positions", a.rope_original_max_positions,
                         b.rope_original_max_positions);
  }
  for (const auto& [key, x, y] : numbers)
    if (!close(x, y))
      return StrFormat("Model.%s is %s, the pretrained model's %s", key, Decimal(x).c_str(),
                       Decimal(y).c_str());
  return MoeDifference(a, b);
}

// Each supported model_type and its causal-LM class.
constexpr std::pair<const char*, const char*> kModelTypes[] = {
    {"llama", "LlamaForCausalLM"},     {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},     {"qwen2_moe", "Qwen2MoeForCausalLM"},
    {"mixtral", "MixtralForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"},
    {"olmoe", "OlmoeForCausalLM"},     {"gpt2", "GPT2LMHeadModel"}};

// The causal-LM class of a supported model_type, or the type itself.
std::string ModelTypeClass(const std::string& type) {
  for (const auto& [name, cls] : kModelTypes)
    if (type == name) return cls;
  return type;
}

// The model_type of a supported class, or "".
std::string ArchitectureModelType(const std::string& arch) {
  for (const auto& [name, cls] : kModelTypes)
    if (arch == cls) return name;
  return "";
}

std::string FirstArchitecture(const YAML::Node& c) {
  const YAML::Node list = c["architectures"];
  if (list && list.IsSequence() && list.size() > 0 && list[0].IsScalar())
    return list[0].as<std::string>();
  return "";
}

}  // namespace

std::string HuggingFaceArchitecture(const std::string& folder) {
  const std::string path = folder + "/config.json";
  if (!PathExists(path)) return "";
  try {
    if (!IsRegularFile(path)) return "(unreadable " + path + ": not a file)";
    const YAML::Node c = YAML::LoadFile(path);
    if (!FirstArchitecture(c).empty()) return FirstArchitecture(c);
    // no architectures: the class of the model type
    if (c["model_type"]) return ModelTypeClass(c["model_type"].as<std::string>());
    return "(none: " + path + " has neither architectures nor model_type)";
  } catch (const std::exception&) {  // YAML's, or the stream's
  }
  return "(unreadable " + path + ")";
}

Status CheckConfigJsonNamesArchitecture(const std::string& folder) {
  const std::string path = folder + "/config.json";
  if (!PathExists(path)) return Status::Ok();
  YAML::Node c;
  TRAINER_RETURN_IF_ERROR(
      LoadJsonFile(path, &c, "Copy the model's config.json into the folder again"));
  if (!c.IsMap() || (!c["architectures"] && !c["model_type"]))
    return CheckpointError(
        StrFormat("%s names no architecture (neither architectures nor model_type): give the "
                  "model's, e.g. \"architectures\": [\"LlamaForCausalLM\"]",
                  path.c_str()));
  // This trainer reads the model from architectures, transformers' AutoModelForCausalLM from
  // model_type: where they disagree, the two would compute different models.
  const std::string arch = FirstArchitecture(c);
  if (arch.empty() || !c["model_type"] || !c["model_type"].IsScalar()) return Status::Ok();
  const std::string type = c["model_type"].as<std::string>();
  // An unsupported class is refused as such, later.
  if (ModelTypeClass(type) == arch || ArchitectureModelType(arch).empty()) return Status::Ok();
  const std::string built =
      ModelTypeClass(type) == type ? "a " + type + " model" : ModelTypeClass(type);
  return CheckpointError(StrFormat(
      "%s: architectures [\"%s\"] and model_type %s name different models (this trainer reads "
      "architectures; transformers' AutoModelForCausalLM builds %s from model_type): make them "
      "agree (model_type %s for %s)",
      path.c_str(), arch.c_str(), type.c_str(), built.c_str(), ArchitectureModelType(arch).c_str(),
      arch.c_str()));
}

bool IsLlamaArchitecture(const std::string& a) {
  return a == "LlamaForCausalLM" || a == "Qwen2ForCausalLM" || a == "Qwen3ForCausalLM" ||
         IsMoeArchitecture(a);
}

Status ReadLlamaConfigJson(const std::string& path, ModelConfig* m, int trained_length) {
  YAML::Node root;
  TRAINER_RETURN_IF_ERROR(LoadJsonFile(path, &root));
  const ConfigReader r(path, root);
  TRAINER_RETURN_IF_ERROR(CheckConfigJsonNamesArchitecture(ParentDirectory(path)));
  const std::string arch = HuggingFaceArchitecture(ParentDirectory(path));
  if (!IsLlamaArchitecture(arch))
    return r.Refuse(
        StrFormat("architecture %s is not supported (%s are)", arch.c_str(), kSupported));
  // Qwen2-MoE has Qwen2's q/k/v biases, Qwen3-MoE Qwen3's q/k norm.
  const bool qwen2 = arch == "Qwen2ForCausalLM" || arch == "Qwen2MoeForCausalLM";
  const bool qwen3 = arch == "Qwen3ForCausalLM" || arch == "Qwen3MoeForCausalLM";
  const bool olmoe = arch == "OlmoeForCausalLM";  // q/k norm over all heads together
  std::string act = "silu", dtype = "float32";
  bool mlp_bias = false, attention_bias = false, sliding = false;
  TRAINER_RETURN_IF_ERROR(r.Get("hidden_act", &act));
  TRAINER_RETURN_IF_ERROR(r.Get("mlp_bias", &mlp_bias));
  TRAINER_RETURN_IF_ERROR(r.Get("attention_bias", &attention_bias));
  TRAINER_RETURN_IF_ERROR(r.Get("use_sliding_window", &sliding));
  TRAINER_RETURN_IF_ERROR(r.Get("torch_dtype", &dtype));
  TRAINER_RETURN_IF_ERROR(r.Get("dtype", &dtype));
  if (act == "swish") act = "silu";  // transformers' name for the same function
  if (act != "silu") return r.Refuse("hidden_act " + act + " is not supported (silu is)");
  if (mlp_bias) return r.Refuse("mlp_bias true is not supported (the MLP has no biases here)");
  if (attention_bias && !qwen2)
    return r.Refuse(arch + " with attention_bias true is not supported (it biases o_proj too)");
  if (sliding) return r.Refuse("use_sliding_window true is not supported (full attention only)");
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16")
    return r.Refuse("dtype " + dtype + " is not supported (float32, bfloat16, float16 are)");
  ModelConfig c;
  c.arch = "llama";
  c.qkv_bias = qwen2;
  c.qk_norm = qwen3 || olmoe;
  if (olmoe) c.qk_norm_type = "full";
  c.tie_embeddings = false;
  // transformers' defaults where config.json leaves them out
  c.norm_eps = arch == "MixtralForCausalLM" || arch == "OlmoeForCausalLM" ? 1e-5 : 1e-6;
  c.max_seq_len = 2048;
  const char* required[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size"};
  for (const char* key : required)
    if (!r.Has(key)) return r.Refuse(StrFormat("%s has no %s", arch.c_str(), key));
  TRAINER_RETURN_IF_ERROR(r.Get("vocab_size", &c.vocab_size));
  TRAINER_RETURN_IF_ERROR(r.Get("hidden_size", &c.hidden_size));
  TRAINER_RETURN_IF_ERROR(r.Get("num_hidden_layers", &c.num_layers));
  if (c.num_layers < 1 || c.num_layers > kMaxLayers)
    return r.Refuse(StrFormat("num_hidden_layers %d is not in [1, %d]", c.num_layers, kMaxLayers));
  TRAINER_RETURN_IF_ERROR(r.Get("num_attention_heads", &c.num_heads));
  c.num_kv_heads = c.num_heads;
  TRAINER_RETURN_IF_ERROR(r.Get("num_key_value_heads", &c.num_kv_heads));
  if (c.num_heads <= 0 || c.hidden_size <= 0 || c.num_kv_heads <= 0)
    return r.Refuse("hidden_size, num_attention_heads and num_key_value_heads must be positive");
  // transformers' defaults
  c.head_dim = arch == "Qwen3ForCausalLM" ? 128 : c.hidden_size / c.num_heads;
  TRAINER_RETURN_IF_ERROR(r.Get("head_dim", &c.head_dim));
  TRAINER_RETURN_IF_ERROR(r.Get("intermediate_size", &c.ffn_hidden_size));
  TRAINER_RETURN_IF_ERROR(r.Get("rms_norm_eps", &c.norm_eps));
  TRAINER_RETURN_IF_ERROR(r.Get("max_position_embeddings", &c.max_seq_len));
  TRAINER_RETURN_IF_ERROR(r.Get("tie_word_embeddings", &c.tie_embeddings));
  TRAINER_RETURN_IF_ERROR(ReadRope(r, root, arch, &c));
  if (IsMoeArchitecture(arch)) TRAINER_RETURN_IF_ERROR(ReadMoeConfig(r, arch, trained_length, &c));
  if (c.num_heads % c.num_kv_heads != 0)
    return r.Refuse(StrFormat("num_attention_heads %d is not a multiple of num_key_value_heads %d",
                              c.num_heads, c.num_kv_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return r.Refuse(
        StrFormat("head_dim %d is not a positive even number (RoPE rotates pairs)", c.head_dim));
  *m = c;
  return Status::Ok();
}

std::string LlamaModelOverrides(const ModelConfig& m) {
  std::string s = StrFormat(
      "-o Model.arch=llama -o Model.vocab_size=%d -o Model.hidden_size=%d -o Model.num_layers=%d "
      "-o Model.num_heads=%d -o Model.num_kv_heads=%d -o Model.head_dim=%d "
      "-o Model.ffn_hidden_size=%d -o Model.norm_eps=%s -o Model.rope_theta=%s "
      "-o Model.rope_scaling=%s",
      m.vocab_size, m.hidden_size, m.num_layers, m.num_heads, m.kv_heads(), m.head_size(),
      m.ffn_size(), Decimal(m.norm_eps).c_str(), Decimal(m.rope_theta).c_str(),
      m.rope_scaling.c_str());
  if (m.rope_scaling == "llama3")
    s += StrFormat(
        " -o Model.rope_factor=%s -o Model.rope_low_freq_factor=%s "
        "-o Model.rope_high_freq_factor=%s -o Model.rope_original_max_positions=%d",
        Decimal(m.rope_factor).c_str(), Decimal(m.rope_low_freq_factor).c_str(),
        Decimal(m.rope_high_freq_factor).c_str(), m.rope_original_max_positions);
  s += StrFormat(
      " -o Model.qkv_bias=%s -o Model.qk_norm=%s -o Model.tie_embeddings=%s "
      "-o Model.max_seq_len=%d",
      m.qkv_bias ? "true" : "false", m.qk_norm ? "true" : "false",
      m.tie_embeddings ? "true" : "false", m.max_seq_len);
  if (m.qk_norm && m.qk_norm_type != "head") s += " -o Model.qk_norm_type=" + m.qk_norm_type;
  return s + MoeModelOverrides(m);
}

Status LlamaConfigJson(const ModelConfig& m, bool bf16, int64_t eod_id, std::string* json) {
  HfMoeClass moe;
  if (m.moe()) TRAINER_RETURN_IF_ERROR(MoeExportClass(m, &moe));
  if (!m.moe() && m.qk_norm && m.qk_norm_type == "full")
    return UsageError(
        "a dense model with q/k norms over all heads (Model.qk_norm_type=full) is OLMo 2's, "
        "which export does not write (with experts it is OLMoE's, which it does)");
  if (m.qkv_bias && m.qk_norm && !m.moe())
    return UsageError(
        "a model with both Model.qkv_bias and Model.qk_norm has no transformers class (Qwen3's "
        "attention_bias also biases o_proj): export supports one or the other");
  if (m.qkv_bias && !m.qk_norm && !m.moe() && m.head_size() * m.num_heads != m.hidden_size)
    return UsageError(StrFormat(
        "the checkpoint's Qwen2 model (Model.qkv_bias) has head_dim %d, not hidden_size / "
        "num_heads (%d): Qwen2 in transformers 4 derives it so and could not load the export; "
        "keep the checkpoint (trainer sample and eval run it)",
        m.head_size(), m.hidden_size / m.num_heads));
  const char* arch = m.moe()      ? moe.architecture.c_str()
                     : m.qk_norm  ? "Qwen3ForCausalLM"
                     : m.qkv_bias ? "Qwen2ForCausalLM"
                                  : "LlamaForCausalLM";
  const char* type = m.moe()      ? moe.model_type.c_str()
                     : m.qk_norm  ? "qwen3"
                     : m.qkv_bias ? "qwen2"
                                  : "llama";
  const bool llama = !m.qk_norm && !m.qkv_bias && !m.moe();
  const std::string rope =
      m.rope_scaling != "llama3"
          ? "null"
          : StrFormat(
                "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
                "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d}",
                JsonFloat(m.rope_factor).c_str(), JsonFloat(m.rope_low_freq_factor).c_str(),
                JsonFloat(m.rope_high_freq_factor).c_str(), m.rope_original_max_positions);
  // The training data's end-of-document id, else trainer pack's (vocab_size - 1).
  const int eod = eod_id >= 0 ? static_cast<int>(eod_id) : m.vocab_size - 1;
  *json = StrFormat(
      "{\n"
      "  \"architectures\": [\"%s\"],\n"
      "  \"model_type\": \"%s\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"hidden_size\": %d,\n"
      "  \"intermediate_size\": %d,\n"
      "  \"num_hidden_layers\": %d,\n"
      "  \"num_attention_heads\": %d,\n"
      "  \"num_key_value_heads\": %d,\n"
      "  \"head_dim\": %d,\n"
      "  \"hidden_act\": \"silu\",\n"
      "  \"max_position_embeddings\": %d,\n"
      "  \"rms_norm_eps\": %s,\n"
      "  \"rope_theta\": %s,\n"
      "  \"rope_scaling\": %s,\n"
      "  \"attention_bias\": false,\n"
      "  \"attention_dropout\": 0.0,\n"
      "%s%s"
      "  \"initializer_range\": 0.02,\n"
      "  \"tie_word_embeddings\": %s,\n"
      "  \"use_cache\": true,\n"
      "  \"bos_token_id\": %d,\n"
      "  \"eos_token_id\": %d,\n"
      "  \"torch_dtype\": \"%s\"\n"
      "}\n",
      arch, type, m.vocab_size, m.hidden_size, m.moe() ? moe.intermediate_size : m.ffn_size(),
      m.num_layers, m.num_heads, m.kv_heads(), m.head_size(), m.max_seq_len,
      JsonFloat(m.norm_eps).c_str(), JsonFloat(m.rope_theta).c_str(), rope.c_str(),
      llama ? "  \"mlp_bias\": false,\n  \"pretraining_tp\": 1,\n"
            : "  \"use_sliding_window\": false,\n",
      moe.keys.c_str(), m.tie_embeddings ? "true" : "false", eod, eod,
      bf16 ? "bfloat16" : "float32");
  return Status::Ok();
}

Status CheckLlamaConfigJsonFits(const std::string& weights, const ModelConfig& model) {
  const std::string folder = HuggingFaceFolder(weights), config = folder + "/config.json";
  if (!PathExists(config))
    return CheckpointError(
        StrFormat("%s (Checkpoint.init_from) has no config.json beside it: a llama-family model's "
                  "architecture, RoPE and norm settings are read from it",
                  weights.c_str()));
  ModelConfig pretrained;
  TRAINER_RETURN_IF_ERROR(ReadLlamaConfigJson(config, &pretrained, model.max_seq_len));
  const std::string needs = LlamaModelOverrides(pretrained);
  const std::string difference = Difference(model, pretrained);
  if (!difference.empty())
    return CheckpointError(StrFormat("%s (Checkpoint.init_from): %s. The pretrained model needs %s",
                                     folder.c_str(), difference.c_str(), needs.c_str()));
  return Status::Ok();
}

Status LlamaParameterValues(const std::string& weights, const ModelConfig& model,
                            const ModelPartition& part, const std::vector<ParameterInfo>& params,
                            std::vector<float>* flat, Progress* progress) {
  TRAINER_RETURN_IF_ERROR(CheckLlamaConfigJsonFits(weights, model));
  const std::string folder = HuggingFaceFolder(weights);
  std::map<std::string, SafetensorsTensor> tensors;
  TRAINER_RETURN_IF_ERROR(ReadHuggingFaceTensors(weights, &tensors, progress));
  TRAINER_RETURN_IF_ERROR(StackHuggingFaceExperts(weights, model, &tensors));
  const std::string architecture = HuggingFaceArchitecture(folder);
  std::set<std::string> known;
  const std::vector<ParameterInfo> all = FullBaseParameterList(model);
  for (const ParameterInfo& p : all) known.insert(p.name);
  const std::string embed = "model.embed_tokens.weight";
  for (const auto& [name, t] : tensors) {
    if (known.count(name)) continue;
    // Older transformers saved RoPE's inv_freq; a tied model may still carry its lm_head.
    const std::string buffer = ".rotary_emb.inv_freq";
    if (name.size() > buffer.size() && EndsWith(name, buffer)) continue;
    if (name == "lm_head.weight" && model.tie_embeddings && tensors.count(embed)) {
      if (tensors.at(embed).values == t.values) continue;
      return CheckpointError(StrFormat(
          "%s (Checkpoint.init_from) holds an lm_head.weight unlike its %s, and its config.json "
          "ties the two (tie_word_embeddings true), so which one the model uses is not defined. "
          "Set tie_word_embeddings to false in config.json to keep the separate head (then "
          "-o Model.tie_embeddings=false), or remove lm_head.weight to use the embedding for both",
          folder.c_str(), embed.c_str()));
    }
    return CheckpointError(
        StrFormat("%s (Checkpoint.init_from) holds %s %s, which the %s of config.json has no "
                  "place for",
                  folder.c_str(), name.c_str(), ShapeText(t.shape).c_str(), architecture.c_str()));
  }
  for (const ParameterInfo& p : all)
    if (!tensors.count(p.name))
      return CheckpointError(StrFormat(
          "%s (Checkpoint.init_from) lacks %s, which its %s has: copy the whole model folder "
          "(every safetensors file and its index)",
          folder.c_str(), HuggingFaceName(architecture, p).c_str(), architecture.c_str()));
  flat->assign(TotalLocalElements(params), 0.f);
  std::vector<float> full;
  for (const ParameterInfo& p : params) {
    const SafetensorsTensor& t = tensors.at(p.name);
    std::vector<int64_t> want = p.full_shape;
    const bool vocab_rows = p.role == ParamRole::kTokenEmbedding || p.role == ParamRole::kLmHead;
    if (vocab_rows) want[0] = model.vocab_size;  // the padding rows stay zero
    if (t.shape != want)
      return CheckpointError(StrFormat(
          "%s (Checkpoint.init_from): %s is %s, the model of its "
          "config.json needs %s",
          folder.c_str(), p.name.c_str(), ShapeText(t.shape).c_str(), ShapeText(want).c_str()));
    full.assign(static_cast<size_t>(p.full_numel()), 0.f);
    std::copy(t.values.begin(), t.values.end(), full.begin());
    const ShardSlot slot = ShardSlotOf(p, part);
    ExtractShard(p, slot.rank, slot.size, full.data(), flat->data() + p.offset);
  }
  return Status::Ok();
}

}  // namespace trainer
