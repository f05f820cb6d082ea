// Initial weights from a trainer checkpoint or a Hugging Face GPT-2 (pretrained.h).
#include "checkpoint/pretrained.h"

#include <yaml-cpp/yaml.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/hf_llama.h"
#include "checkpoint/hf_moe.h"
#include "checkpoint/safetensors.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace {

const char kTransformer[] = "transformer.";

// Whether transformers stores `p` transposed: the blocks' matrices (its Conv1D layers).
bool StoredTransposed(const ParameterInfo& p) {
  return p.full_shape.size() == 2 && p.name.rfind("transformer.h.", 0) == 0;
}

// Tensors of a GPT-2 file that the model does not take: the attention's causal-mask buffers
// (older transformers) and lm_head, which is tied to wte.
bool Skipped(const std::string& name) {
  return EndsWith(name, ".attn.bias") || EndsWith(name, ".attn.masked_bias") ||
         name == "lm_head.weight";
}

// `p`'s whole tensor in this trainer's layout from the file's tensor `t` (Hugging Face's layout).
Status FromHuggingFace(const ModelConfig& model, const ParameterInfo& p, const SafetensorsTensor& t,
                       const std::string& file, std::vector<float>* full) {
  full->assign(static_cast<size_t>(p.full_numel()), 0.f);
  const std::vector<int64_t>& want = p.full_shape;
  auto mismatch = [&](const std::vector<int64_t>& expected, const char* key) {
    return CheckpointError(
        StrFormat("%s (Checkpoint.init_from): %s is %s, the config's model needs %s. Set %s to "
                  "the pretrained model's",
                  file.c_str(), t.name.c_str(), ShapeText(t.shape).c_str(),
                  ShapeText(expected).c_str(), key));
  };
  if (p.name == "transformer.wte.weight") {  // (vocab_size, C); the padding rows stay zero
    const std::vector<int64_t> expected = {model.vocab_size, want[1]};
    if (t.shape != expected) return mismatch(expected, "Model.vocab_size and Model.hidden_size");
    std::copy(t.values.begin(), t.values.end(), full->begin());
  } else if (p.name == "transformer.wpe.weight") {  // the first max_seq_len positions
    if (t.shape.size() != 2 || t.shape[1] != want[1] || t.shape[0] < want[0])
      return mismatch(want, "Model.max_seq_len (at most the pretrained one) and Model.hidden_size");
    std::copy(t.values.begin(), t.values.begin() + p.full_numel(), full->begin());
  } else if (StoredTransposed(p)) {  // Conv1D: (in, out)
    const int64_t rows = want[0], cols = want[1];
    if (t.shape != std::vector<int64_t>{cols, rows})
      return mismatch({cols, rows}, "Model.hidden_size, Model.ffn_hidden_size");
    cpu::transpose(full->data(), t.values.data(), cols, rows);
  } else {
    if (t.shape != want) return mismatch(want, "Model.hidden_size, Model.ffn_hidden_size");
    std::copy(t.values.begin(), t.values.end(), full->begin());
  }
  return Status::Ok();
}

Status FromSafetensors(const std::string& file, const ModelConfig& model,
                       const ModelPartition& part, const std::vector<ParameterInfo>& params,
                       std::vector<float>* flat, Progress* progress) {
  std::map<std::string, SafetensorsTensor> tensors;
  TRAINER_RETURN_IF_ERROR(ReadHuggingFaceTensors(file, &tensors, progress));
  auto find = [&](const std::string& name) -> const SafetensorsTensor* {
    auto it = tensors.find(name);
    if (it == tensors.end()) it = tensors.find(name.substr(sizeof(kTransformer) - 1));
    return it == tensors.end() ? nullptr : &it->second;
  };
  // A tensor the model has no place for means another model (more layers, another name scheme).
  std::set<std::string> known, zero_biases;
  for (const ParameterInfo& p : FullBaseParameterList(model)) {
    known.insert(p.name);
    known.insert(p.name.substr(sizeof(kTransformer) - 1));
  }
  // A GPT-2 without biases takes a file with zero biases (what `trainer export` writes for it).
  if (model.arch != "llama" && !model.bias) {
    ModelConfig with_bias = model;
    with_bias.bias = true;
    for (const ParameterInfo& p : FullParameterList(with_bias))
      if (!known.count(p.name)) {
        zero_biases.insert(p.name);
        zero_biases.insert(p.name.substr(sizeof(kTransformer) - 1));
      }
  }
  for (const auto& [name, t] : tensors) {
    if (zero_biases.count(name)) {
      for (float v : t.values)
        if (v != 0.f)
          return CheckpointError(StrFormat(
              "%s (Checkpoint.init_from) holds the bias %s with non-zero values, and the config's "
              "model has no biases (Model.bias=false). Set Model.bias=true",
              file.c_str(), name.c_str()));
      continue;
    }
    if (!known.count(name) && !Skipped(name))
      return CheckpointError(StrFormat(
          "%s (Checkpoint.init_from) holds %s %s, which the config's model has no place for. "
          "Set Model.num_layers to the pretrained model's (a GPT-2 with transformers' names)",
          file.c_str(), name.c_str(), ShapeText(t.shape).c_str()));
  }
  flat->assign(TotalLocalElements(params), 0.f);
  std::vector<float> full;
  for (const ParameterInfo& p : params) {
    const SafetensorsTensor* t = find(p.name);
    if (t == nullptr)
      return CheckpointError(
          StrFormat("%s (Checkpoint.init_from) lacks %s, which the config's model has. Set "
                    "Model.num_layers to the pretrained model's",
                    file.c_str(), p.name.c_str()));
    TRAINER_RETURN_IF_ERROR(FromHuggingFace(model, p, *t, file, &full));
    const ShardSlot slot = ShardSlotOf(p, part);
    ExtractShard(p, slot.rank, slot.size, full.data(), flat->data() + p.offset);
  }
  return Status::Ok();
}

// The GPT-2 this trainer computes is transformers' with its defaults for these keys: a
// config.json that sets another value would give another model from the same weights.
Status CheckGpt2ConfigJson(const std::string& folder, const ModelConfig* model = nullptr) {
  const std::string path = folder + "/config.json";
  if (!PathExists(path)) return Status::Ok();
  YAML::Node root;
  TRAINER_RETURN_IF_ERROR(LoadJsonFile(path, &root));
  const ConfigReader r(path, root);
  int heads = 12;  // GPT2Config's default; the weights' shapes do not show it
  TRAINER_RETURN_IF_ERROR(r.Get("n_head", &heads));
  if (model != nullptr && heads != model->num_heads)
    return r.Refuse(StrFormat(
        "n_head %d, the config's Model.num_heads %d: the same weights split into other heads "
        "compute another model. Set -o Model.num_heads=%d",
        heads, model->num_heads, heads));
  bool tied = true, scale = true, by_layer = false;
  std::string activation = "gelu_new";
  double eps = 1e-5;
  TRAINER_RETURN_IF_ERROR(r.Get("tie_word_embeddings", &tied));
  TRAINER_RETURN_IF_ERROR(r.Get("scale_attn_weights", &scale));
  TRAINER_RETURN_IF_ERROR(r.Get("scale_attn_by_inverse_layer_idx", &by_layer));
  TRAINER_RETURN_IF_ERROR(r.Get("activation_function", &activation));
  TRAINER_RETURN_IF_ERROR(r.Get("layer_norm_epsilon", &eps));
  const char* why = !tied
                        ? "tie_word_embeddings false (a head of its own; GPT-2 here ties it to wte)"
                    : !scale   ? "scale_attn_weights false (attention scores here are scaled)"
                    : by_layer ? "scale_attn_by_inverse_layer_idx true"
                    : activation != "gelu_new" && activation != "gelu_pytorch_tanh"
                        ? "an activation_function other than gelu_new (GELU's tanh form)"
                    : eps != 1e-5 ? "a layer_norm_epsilon other than 1e-5"
                                  : nullptr;
  if (why == nullptr) return Status::Ok();
  return r.Refuse(
      StrFormat("%s is not supported: this trainer's GPT-2 would compute another "
                "model from these weights (GPT2LMHeadModel with transformers' "
                "defaults is)",
                why));
}

// A pretrained model's dropout where it differs from the run's: transformers would train the
// model with config.json's (attention_dropout; GPT-2's attn_pdrop, resid_pdrop, embd_pdrop,
// 0.1 each by default), this run with the Model keys. Said, not refused: many fine-tune without.
Status WarnOfOtherDropout(const std::string& folder, bool llama, const ModelConfig& model) {
  const std::string path = folder + "/config.json";
  if (!PathExists(path)) return Status::Ok();
  YAML::Node root;
  TRAINER_RETURN_IF_ERROR(LoadJsonFile(path, &root));
  const ConfigReader r(path, root);
  double attention = llama ? 0 : 0.1, residual = llama ? 0 : 0.1, embedding = residual;
  TRAINER_RETURN_IF_ERROR(r.Get(llama ? "attention_dropout" : "attn_pdrop", &attention));
  if (!llama) TRAINER_RETURN_IF_ERROR(r.Get("resid_pdrop", &residual));
  if (!llama) TRAINER_RETURN_IF_ERROR(r.Get("embd_pdrop", &embedding));
  if (attention == model.attention_dropout && residual == model.hidden_dropout &&
      embedding == model.hidden_dropout)
    return Status::Ok();
  const std::string theirs = llama ? StrFormat("attention_dropout %g", attention)
                                   : StrFormat("attn_pdrop %g, resid_pdrop %g, embd_pdrop %g",
                                               attention, residual, embedding);
  LogSharedWarningOnce(StrFormat(
      "%s has %s, with which transformers would train it; this run trains with "
      "Model.attention_dropout %g and Model.hidden_dropout %g. Set those to match if you meant to",
      path.c_str(), theirs.c_str(), model.attention_dropout, model.hidden_dropout));
  return Status::Ok();
}

// Weights without a config.json are read as a GPT-2 (transformers' GPT-2 defaults); a
// llama-family file's names say it needs its config.json instead.
Status RefuseLlamaWithoutConfig(const std::string& weights) {
  std::vector<SafetensorsEntry> entries;
  TRAINER_RETURN_IF_ERROR(ReadHuggingFaceEntries(weights, &entries));
  const std::string embed = "model.embed_tokens.weight";
  for (const SafetensorsEntry& e : entries)
    if (e.name == embed)
      return CheckpointError(StrFormat(
          "%s (Checkpoint.init_from) holds a llama-family model (%s) with no config.json beside "
          "it: copy the model's config.json into %s (its architecture, RoPE and norm settings are "
          "read from it)",
          weights.c_str(), embed.c_str(), HuggingFaceFolder(weights).c_str()));
  return Status::Ok();
}

}  // namespace

std::vector<SafetensorsTensor> ToHuggingFace(const ModelConfig& model,
                                             const std::vector<ParameterInfo>& params,
                                             const std::vector<float>& flat) {
  std::vector<SafetensorsTensor> tensors;
  for (const ParameterInfo& p : params) {
    const float* values = flat.data() + p.offset;
    if (AppendHuggingFaceMoeTensors(model, p, values, &tensors)) continue;  // experts apart
    SafetensorsTensor t;
    t.name = p.name;
    t.shape = p.full_shape;
    if (p.role == ParamRole::kTokenEmbedding || p.role == ParamRole::kLmHead)
      t.shape[0] = model.vocab_size;  // no padding rows
    if (StoredTransposed(p)) std::swap(t.shape[0], t.shape[1]);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    t.values.resize(static_cast<size_t>(n));
    if (StoredTransposed(p))
      cpu::transpose(t.values.data(), values, p.full_shape[0], p.full_shape[1]);
    else
      std::copy(values, values + n, t.values.begin());
    tensors.push_back(std::move(t));
  }
  // GPT-2 without biases (Model.bias: false) is transformers' GPT-2 with zero biases: it has no
  // bias-free GPT-2, so the file holds them (its Conv1D biases are not transposed).
  if (model.arch != "llama" && !model.bias) {
    ModelConfig with_bias = model;
    with_bias.bias = true;
    const ModelSpec spec = MakeModelSpec(with_bias);
    for (const ParameterSpec& p :
         SpecParameters(spec, false, 1, true, true, 0, static_cast<int>(spec.layers))) {
      if (p.full_shape.size() != 1 || IsNormWeight(p.role) || p.role == ParamRole::kQNorm ||
          p.role == ParamRole::kKNorm)
        continue;
      SafetensorsTensor t;
      t.name = p.name;
      t.shape = p.full_shape;
      t.values.assign(static_cast<size_t>(p.full_shape[0]), 0.f);
      tensors.push_back(std::move(t));
    }
  }
  return tensors;
}

Status HuggingFaceConfigJson(const ModelConfig& model, bool bf16, int64_t eod_id,
                             std::string* json) {
  if (model.arch == "llama") return LlamaConfigJson(model, bf16, eod_id, json);
  const int eod = eod_id >= 0 ? static_cast<int>(eod_id) : model.vocab_size - 1;
  // Model.hidden_dropout / attention_dropout, for whoever trains the exported model further.
  const std::string hidden_pdrop = StrFormat("%g", model.hidden_dropout);
  const std::string attn_pdrop = StrFormat("%g", model.attention_dropout);
  *json = StrFormat(
      "{\n"
      "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
      "  \"model_type\": \"gpt2\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"n_positions\": %d,\n"
      "  \"n_embd\": %d,\n"
      "  \"n_layer\": %d,\n"
      "  \"n_head\": %d,\n"
      "  \"n_inner\": %d,\n"
      "  \"activation_function\": \"gelu_new\",\n"
      "  \"layer_norm_epsilon\": 1e-05,\n"
      "  \"resid_pdrop\": %s,\n"
      "  \"embd_pdrop\": %s,\n"
      "  \"attn_pdrop\": %s,\n"
      "  \"initializer_range\": 0.02,\n"
      "  \"scale_attn_weights\": true,\n"
      "  \"tie_word_embeddings\": true,\n"
      "  \"bos_token_id\": %d,\n"
      "  \"eos_token_id\": %d,\n"
      "  \"torch_dtype\": \"%s\"\n"
      "}\n",
      model.vocab_size, model.max_seq_len, model.hidden_size, model.num_layers, model.num_heads,
      model.ffn_size(), hidden_pdrop.c_str(), hidden_pdrop.c_str(), attn_pdrop.c_str(), eod, eod,
      bf16 ? "bfloat16" : "float32");
  return Status::Ok();
}

std::string LoraBaseName(const TrainConfig& config) {
  if (!config.checkpoint.init_from.empty())
    return "Checkpoint.init_from=" + config.checkpoint.init_from;
  return StrFormat("Global.seed=%llu", static_cast<unsigned long long>(config.global.seed));
}

std::string ResolvePretrained(const std::string& path) {
  const std::string weights = HuggingFaceWeightsFile(path);
  return weights.empty() ? FindCheckpointFile(path) : weights;
}

Status PretrainedFingerprint(const std::string& file, std::string* text) {
  if (KindOfHdf5File(file) != Hdf5FileKind::kCheckpoint)
    return HuggingFaceWeightsFingerprint(file, text);
  CheckpointSummary summary;
  TRAINER_RETURN_IF_ERROR(ReadCheckpointSummary(file, &summary));
  // The weights' CRC-32 where the file has them (format 2): a copy of the same weights matches
  // wherever it lies, other weights of the same shape do not.
  uint32_t crc = 0;
  *text =
      CheckpointWeightsChecksum(file, &crc).ok()
          ? StrFormat("step %lld, weights CRC-32 %08x", static_cast<long long>(summary.step), crc)
          : StrFormat("step %lld, %lld bytes", static_cast<long long>(summary.step),
                      static_cast<long long>(FileSize(file)));
  return Status::Ok();
}

Status LoraBaseIdentity(const TrainConfig& config, std::string* identity) {
  *identity = LoraBaseName(config);
  if (config.checkpoint.init_from.empty()) return Status::Ok();
  const std::string& path = config.checkpoint.init_from;
  std::string file = HuggingFaceWeightsFile(path), fingerprint;
  if (!file.empty()) {  // recorded by size: the form checkpoints of earlier trainers hold
    fingerprint = StrFormat("%lld bytes", FileSize(file));
    // A sharded model: its shards' bytes too (the index's alone stay the same when they change).
    if (EndsWith(file, ".index.json"))
      fingerprint += StrFormat(", shards %lld bytes", HuggingFaceWeightsBytes(file));
  } else {
    file = FindCheckpointFile(path);
    if (file.empty() || !PretrainedFingerprint(file, &fingerprint).ok())
      return CheckpointError(StrFormat(
          "Checkpoint.init_from=%s names no weights (the LoRA base; %s): give the trainer "
          "checkpoint or Hugging Face model the adapters apply to",
          path.c_str(), PathExists(path) ? "no checkpoint or model there" : "it does not exist"));
  }
  char absolute[PATH_MAX];
  if (realpath(file.c_str(), absolute) != nullptr) file = absolute;
  *identity += StrFormat(" (%s, %s)", file.c_str(), fingerprint.c_str());
  return Status::Ok();
}

namespace {

// The resolved part of a recorded LoRA base ("(/abs/file, step 5, 123 bytes)"), or the whole
// text where there is none (a seed, or a checkpoint of an earlier trainer).
std::string ResolvedBase(const std::string& base) {
  const size_t open = base.rfind(" (");
  return !base.empty() && base.back() == ')' && open != std::string::npos ? base.substr(open)
                                                                          : base;
}

// The fingerprint of a resolved base ("step 5, 123 bytes)" of "(/abs/file, step 5, 123 bytes)"),
// "" where there is none.
std::string BaseFingerprint(const std::string& resolved) {
  const size_t comma = resolved.find(", ");
  return resolved.size() > 2 && resolved[1] == '(' && comma != std::string::npos
             ? resolved.substr(comma + 2)
             : "";
}

}  // namespace

Status CheckLoraBase(const std::string& folder_or_file, const TrainConfig& config) {
  if (!config.model.lora()) return Status::Ok();
  const std::string file = CheckpointFile(folder_or_file);
  CheckpointSummary summary;
  TRAINER_RETURN_IF_ERROR(ReadCheckpointSummary(file, &summary));
  const std::string& recorded = summary.lora_base;
  if (recorded.empty()) return Status::Ok();  // not adapters: CheckWeightKind's to say
  std::string configured;
  TRAINER_RETURN_IF_ERROR(LoraBaseIdentity(config, &configured));
  // A checkpoint of an earlier trainer recorded the setting's text alone.
  if (ResolvedBase(recorded) == recorded && recorded.rfind("Checkpoint.", 0) == 0)
    configured = LoraBaseName(config);
  if (ResolvedBase(recorded) == ResolvedBase(configured)) return Status::Ok();
  // A checkpoint of an earlier trainer recorded a sharded base by its index's size alone.
  const size_t shards = configured.rfind(", shards ");
  if (shards != std::string::npos && recorded.find(", shards ") == std::string::npos &&
      ResolvedBase(recorded) == ResolvedBase(configured.substr(0, shards) + ")"))
    return Status::Ok();
  // The same step and weights (their CRC-32s) under another path: the base copied or moved
  // (another cluster, a node-local copy), not another base. A size alone (a Hugging Face
  // folder's) cannot tell two bases of one shape apart, so it never counts.
  const std::string fingerprint = BaseFingerprint(ResolvedBase(recorded));
  if (fingerprint.find("weights CRC-32") != std::string::npos &&
      fingerprint == BaseFingerprint(ResolvedBase(configured))) {
    LogInfo(StrFormat("the LoRA base %s holds the recorded one's weights (%s): taken as a copy",
                      configured.c_str(), recorded.c_str()));
    return Status::Ok();
  }
  return CheckpointError(StrFormat(
      "LoRA base differs (%s): its adapters were trained on %s, this config's base is %s. Point "
      "Checkpoint.init_from at the base recorded (the file named first; -o "
      "Checkpoint.init_from=PATH), or set Global.seed as it was; for another base, start a new "
      "LoRA run in a Checkpoint.dir of its own",
      file.c_str(), recorded.c_str(), configured.c_str()));
}

Status LoadLoraBaseWeights(const TrainConfig& config, GptModel* model, std::string* what,
                           Progress* progress) {
  std::vector<float> flat;
  *what = LoraBaseName(config);
  if (config.checkpoint.init_from.empty())
    flat = InitialParameterValues(config.model, model->partition(), model->frozen_parameters(),
                                  config.global.seed);
  else
    TRAINER_RETURN_IF_ERROR(PretrainedParameterValues(config.checkpoint.init_from, config.model,
                                                      model->partition(),
                                                      model->frozen_parameters(), &flat, what,
                                                      progress));
  return model->SetFrozenParameters(flat);
}

Status CheckPretrainedModelFits(const std::string& path, const ModelConfig& model) {
  const std::string weights = HuggingFaceWeightsFile(path);
  if (weights.empty()) return Status::Ok();
  TRAINER_RETURN_IF_ERROR(CheckConfigJsonNamesArchitecture(HuggingFaceFolder(weights)));
  const std::string arch = HuggingFaceArchitecture(HuggingFaceFolder(weights));
  const bool llama = IsLlamaArchitecture(arch);
  const bool gpt2 = arch.empty() || arch == "GPT2LMHeadModel" || arch == "gpt2";
  if (arch.empty()) TRAINER_RETURN_IF_ERROR(RefuseLlamaWithoutConfig(weights));
  if (!llama && !gpt2)
    return CheckpointError(
        StrFormat("%s (Checkpoint.init_from): architecture %s is not supported (LlamaForCausalLM, "
                  "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen2MoeForCausalLM, MixtralForCausalLM, "
                  "OlmoeForCausalLM, Qwen3MoeForCausalLM, GPT2LMHeadModel are)",
                  weights.c_str(), arch.c_str()));
  if (llama != (model.arch == "llama")) {
    std::string needs, note;
    TRAINER_RETURN_IF_ERROR(ImpliedModelOverrides(weights, &needs, &note));
    return CheckpointError(StrFormat(
        "%s (Checkpoint.init_from) is a %s, the config's Model.arch is %s. The pretrained "
        "model needs %s%s",
        weights.c_str(), llama ? arch.c_str() : "GPT-2", model.arch.c_str(),
        llama ? "" : "-o Model.arch=gpt2 ", needs.c_str()));
  }
  TRAINER_RETURN_IF_ERROR(llama ? CheckLlamaConfigJsonFits(weights, model)
                                : CheckGpt2ConfigJson(HuggingFaceFolder(weights), &model));
  return WarnOfOtherDropout(HuggingFaceFolder(weights), llama, model);
}

Status PretrainedParameterValues(const std::string& path, const ModelConfig& model,
                                 const ModelPartition& part,
                                 const std::vector<ParameterInfo>& params, std::vector<float>* flat,
                                 std::string* what, Progress* progress) {
  ReportProgress(progress, "loading pretrained weights");
  const std::string weights = HuggingFaceWeightsFile(path);
  if (!weights.empty()) {
    TRAINER_RETURN_IF_ERROR(CheckPretrainedModelFits(path, model));
    const std::string arch = HuggingFaceArchitecture(HuggingFaceFolder(weights));
    const bool llama = IsLlamaArchitecture(arch);
    *what = weights + (llama ? " (a Hugging Face " + arch + ")" : " (a Hugging Face GPT-2)");
    const Status read = llama ? LlamaParameterValues(weights, model, part, params, flat, progress)
                              : FromSafetensors(weights, model, part, params, flat, progress);
    ReportProgress(progress, "loading pretrained weights");
    return read;
  }
  const std::string checkpoint = FindCheckpointFile(path);
  if (!checkpoint.empty()) {
    *what = checkpoint + " (a trainer checkpoint's weights)";
    return ReadCheckpointWeights(checkpoint, model, params, part, flat, progress);
  }
  const std::string hint = HuggingFaceFolderHint(path);  // pytorch_model.bin, no weights
  return CheckpointError(StrFormat(
      "Checkpoint.init_from=%s names no weights (%s): give a trainer checkpoint (a step folder, "
      "its checkpoint.h5, or a checkpoint directory) or a Hugging Face model (a folder with "
      "config.json and model.safetensors or model.safetensors.index.json, or the file).%s",
      path.c_str(),
      !PathExists(path)   ? "it does not exist"
      : IsDirectory(path) ? "the folder holds neither a checkpoint nor model.safetensors"
                          : "the file is neither a checkpoint.h5 nor a .safetensors",
      hint.c_str()));
}

Status ImpliedModelOverrides(const std::string& file, std::string* overrides, std::string* note) {
  note->clear();
  const std::string arch = HuggingFaceArchitecture(HuggingFaceFolder(file));
  if (!arch.empty() && arch != "GPT2LMHeadModel" && arch != "gpt2") {
    ModelConfig model;
    TRAINER_RETURN_IF_ERROR(ReadLlamaConfigJson(HuggingFaceFolder(file) + "/config.json", &model));
    *overrides = LlamaModelOverrides(model);
    return Status::Ok();
  }
  TRAINER_RETURN_IF_ERROR(CheckGpt2ConfigJson(HuggingFaceFolder(file)));
  std::vector<SafetensorsEntry> entries;
  TRAINER_RETURN_IF_ERROR(ReadHuggingFaceEntries(file, &entries));
  std::map<std::string, std::vector<int64_t>> shapes;  // without the "transformer." prefix
  std::set<int> layers;
  const std::string prefix = kTransformer, block = "h.";
  for (const SafetensorsEntry& e : entries) {
    std::string name = e.name.rfind(prefix, 0) == 0 ? e.name.substr(prefix.size()) : e.name;
    if (name.rfind(block, 0) == 0) layers.insert(std::atoi(name.c_str() + block.size()));
    shapes[name] = e.shape;
  }
  const auto wte = shapes["wte.weight"], wpe = shapes["wpe.weight"],
             fc = shapes["h.0.mlp.c_fc.weight"];
  if (wte.size() != 2 || wpe.size() != 2 || fc.size() != 2)
    return CheckpointError(
        StrFormat("%s does not hold a GPT-2 as transformers names it (wte.weight, wpe.weight, "
                  "h.0.mlp.c_fc.weight, with or without \"transformer.\")",
                  file.c_str()));
  const int64_t C = wte[1];
  *overrides = StrFormat(
      "-o Model.vocab_size=%lld -o Model.hidden_size=%lld -o Model.num_layers=%zu "
      "-o Model.max_seq_len=%lld -o Model.ffn_hidden_size=%lld",
      static_cast<long long>(wte[0]), static_cast<long long>(C), layers.size(),
      static_cast<long long>(wpe[0]), static_cast<long long>(fc[1] == 4 * C ? 0 : fc[1]));
  const std::string config = ParentDirectory(file) + "/config.json";
  try {
    const YAML::Node c = IsRegularFile(config) ? YAML::LoadFile(config) : YAML::Node();
    if (c["n_head"]) {
      *overrides += " -o Model.num_heads=" + c["n_head"].as<std::string>();
      return Status::Ok();
    }
  } catch (const std::exception&) {  // YAML's, or the stream's
  }
  *note = "no n_head in " + config + ": set Model.num_heads to the pretrained model's";
  return Status::Ok();
}

}  // namespace trainer
