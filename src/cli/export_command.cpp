// `trainer export CHECKPOINT --output DIR`: the model of a checkpoint (any layout) for the
// Hugging Face ecosystem. A GPT-2: DIR/model.safetensors holds its weights under transformers'
// GPT-2 names (GPT2LMHeadModel: its Conv1D layers store weights as (in, out), so the block
// matrices, (out, in) here as in nanoGPT, are transposed; the vocabulary's padding rows are
// dropped; lm_head is tied to wte), and DIR/config.json its GPT2Config (tanh GELU, LayerNorm eps
// 1e-5, no dropout). A llama-family model: its tensors as they are (transformers' names and
// layout) less the padding rows, and a LlamaConfig, Qwen2Config or Qwen3Config (hf_llama.h).
// Above --max-shard-size (5GB) the weights go into model-0000K-of-0000N.safetensors shards with
// model.safetensors.index.json, as save_pretrained writes them. The tensors are read from the
// checkpoint file and written out; no model is built. With
// --tokenizer-dir, the tokenizer the data was packed with goes beside them (a tokenizer.json with
// its folder's tokenizer_config.json, or GPT-2's BPE files as vocab.json and merges.txt), so that
// transformers' tokenizer loads from the same folder. A LoRA checkpoint
// (adapters only) needs --lora: merge (its adapters merged into the base it names: full weights
// as above) or adapter (a PEFT adapter folder, lora_export.h).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <utility>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "checkpoint/lora_export.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/safetensors.h"
#include "cli/checkpoint_model.h"
#include "cli/commands.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"
#include "data/bpe_tokenizer.h"
#include "data/chat.h"
#include "data/hf_tokenizer.h"
#include "model/parameters.h"

namespace trainer {
namespace {

struct ExportOptions {
  std::string checkpoint, output, dtype = "f32", tokenizer_dir, max_shard_size = "5GB", lora;
  std::vector<std::string> overrides;
};

// A usage error naming the first of `paths` that exists: export replaces no file.
Status RefuseExisting(const std::vector<std::string>& paths, const std::string& output) {
  for (const std::string& path : paths)
    if (PathExists(path))
      return UsageError(
          StrFormat("%s exists (trainer export --output %s): remove it or choose another --output",
                    path.c_str(), output.c_str()));
  return Status::Ok();
}

// The weight shards (model-0000K-of-0000N.safetensors) already in `folder`: an earlier export's,
// which would lie beside this one's unlike any file its index names.
std::vector<std::string> ShardsIn(const std::string& folder) {
  std::vector<std::string> shards;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "model-", suffix = ".safetensors";
    if (name.size() > prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
        EndsWith(name, suffix) && name.find("-of-") != std::string::npos)
      shards.push_back(folder + "/" + name);
  }
  std::sort(shards.begin(), shards.end());
  return shards;
}

// What --tokenizer-dir gives the export: a Hugging Face tokenizer.json (Qwen, Llama-3, SmolLM2:
// with its added and special tokens) and the files transformers reads beside it, its
// tokenizer_config.json naming PreTrainedTokenizerFast and the eos token where it names none
// (else AutoTokenizer takes the class of config.json's model type, such as LlamaTokenizerFast,
// which adds a BOS of its own); else GPT-2's vocab.json and merges.txt (or encoder.json and
// vocab.bpe). Refused where the tokenizer has more ids than the model's vocabulary.
struct ExportedTokenizer {
  std::vector<std::pair<std::string, std::string>> copies;  // (from, name in --output)
  std::string tokenizer_config;     // tokenizer_config.json's text; "" for GPT-2's files
  std::vector<int64_t> reply_ends;  // the chat templates' end markers it has (<|im_end|>, ...)
  int64_t eod = -1;                 // its end of document
};

Status ExportTokenizer(const std::string& dir, const ModelConfig& model, int64_t data_eod,
                       ExportedTokenizer* out) {
  const auto gpt2 = [&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(const std::shared_ptr<const BpeVocabulary> bpe,
                             LoadModelTokenizer(dir, model));
    out->copies = {{bpe->vocabulary_path(), "vocab.json"}, {bpe->merges_path(), "merges.txt"}};
    return Status::Ok();
  };
  const bool gpt2_files = PathExists(dir + "/vocab.json") && PathExists(dir + "/merges.txt");
  const auto sentencepiece = [&](const char* which) {
    return UsageError(StrFormat(
        "--tokenizer-dir %s holds a SentencePiece tokenizer (tokenizer.model%s), which export "
        "does not copy: copy the folder's tokenizer files beside the export by hand",
        dir.c_str(), which));
  };
  if (!PathExists(dir + "/tokenizer.json"))
    return PathExists(dir + "/tokenizer.model") && !gpt2_files ? sentencepiece("") : gpt2();
  StatusOr<std::unique_ptr<HfTokenizer>> loaded =
      HfTokenizer::Load(dir, "--tokenizer-dir", data_eod);
  if (!loaded.ok() && gpt2_files)
    return gpt2();  // a tokenizer.json this reader does not take, beside GPT-2's files
  if (!loaded.ok() && PathExists(dir + "/tokenizer.model"))
    return sentencepiece("; its tokenizer.json is not byte-level BPE");
  if (!loaded.ok()) return loaded.status();
  const HfTokenizer& tokenizer = *loaded.value();
  TRAINER_RETURN_IF_ERROR(CheckTokenizerFitsModel(dir, tokenizer.vocab_size(), model));
  for (const char* name : {"tokenizer.json", "special_tokens_map.json", "vocab.json", "merges.txt"})
    if (PathExists(dir + "/" + name)) out->copies.emplace_back(dir + "/" + name, name);
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (PathExists(dir + "/tokenizer_config.json")) {
    TRAINER_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(dir + "/tokenizer_config.json"));
    config = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object())
      return DataError(
          StrFormat("unreadable %s/tokenizer_config.json (--tokenizer-dir): not a "
                    "JSON object. Fix or remove it",
                    dir.c_str()));
  }
  if (!config.contains("tokenizer_class")) config["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (!config.contains("eos_token"))
    config["eos_token"] = tokenizer.Decode(static_cast<uint32_t>(tokenizer.eod_id()));
  out->tokenizer_config = config.dump(2) + "\n";
  for (const std::string& marker : {ChatReplyEnd("chatml"), ChatReplyEnd("llama3")})
    if (const int64_t id = tokenizer.TokenId(marker); id >= 0) out->reply_ends.push_back(id);
  out->eod = tokenizer.eod_id();
  return Status::Ok();
}

// --lora adapter: adapter_config.json and adapter_model.safetensors for PEFT.
Status ExportAdapter(const ExportOptions& o, const TrainConfig& tc, const std::string& file,
                     SafetensorsDType dtype) {
  const std::string config = o.output + "/adapter_config.json";
  const std::string weights = o.output + "/adapter_model.safetensors";
  TRAINER_RETURN_IF_ERROR(RefuseExisting({config, weights}, o.output));
  std::string json;
  std::vector<SafetensorsTensor> tensors;
  TRAINER_RETURN_IF_ERROR(PeftAdapter(tc, file, &json, &tensors));
  TRAINER_RETURN_IF_ERROR(MakeDirectories(o.output));
  TRAINER_RETURN_IF_ERROR(
      WriteSafetensors(weights, tensors, dtype, {{"format", "pt"}, {"source", file}}));
  TRAINER_RETURN_IF_ERROR(WriteFileAtomically(config, json));
  std::cout << StrFormat(
                   "exported the LoRA adapters of %s: %zu tensors (rank %d, alpha %g, %s) to "
                   "%s/adapter_model.safetensors and adapter_config.json; load with "
                   "peft.PeftModel.from_pretrained(base_model, \"%s\")",
                   file.c_str(), tensors.size(), tc.model.lora_rank, tc.model.lora_alpha,
                   o.dtype.c_str(), o.output.c_str(), o.output.c_str())
            << std::endl;
  return Status::Ok();
}

// *checkpoint: the checkpoint file it read (ResolveCheckpoint's).
Status Export(const ExportOptions& o, RunContext* ctx, std::string* checkpoint) {
  if (o.dtype != "f32" && o.dtype != "bf16")
    return UsageError(StrFormat("--dtype %s: use f32 or bf16", o.dtype.c_str()));
  const uint64_t max_shard_bytes = ParseShardSize(o.max_shard_size);
  if (max_shard_bytes == 0)
    return UsageError(
        StrFormat("--max-shard-size %s: give bytes, or a size such as 5GB, 500MB, "
                  "20KB or 2GiB",
                  o.max_shard_size.c_str()));
  const std::string config = o.output + "/config.json";
  std::vector<std::string> outputs = {o.output + "/model.safetensors",
                                      o.output + "/model.safetensors.index.json", config};
  TRAINER_RETURN_IF_ERROR(RefuseExisting(outputs, o.output));
  TRAINER_RETURN_IF_ERROR(RefuseExisting(ShardsIn(o.output), o.output));  // an earlier export's
  if (!o.lora.empty() && o.lora != "merge" && o.lora != "adapter")
    return UsageError(StrFormat("--lora %s (trainer export): use merge (full Hugging Face weights) "
                                "or adapter (a PEFT adapter folder)",
                                o.lora.c_str()));
  TRAINER_RETURN_IF_ERROR(ResolveCheckpoint(o.checkpoint, "export", checkpoint));
  const std::string& file = *checkpoint;
  TRAINER_ASSIGN_OR_RETURN(const TrainConfig tc, OneProcessConfig(file, o.overrides, 0));
  if (tc.model.lora() != !o.lora.empty())
    return UsageError(
        tc.model.lora()
            ? StrFormat("%s holds LoRA adapters (of %s): give --lora merge (full Hugging Face "
                        "weights) or --lora adapter (a PEFT adapter folder)",
                        file.c_str(), LoraBaseName(tc).c_str())
            : StrFormat("--lora %s: %s holds no LoRA adapters (Model.lora_rank=0); leave --lora "
                        "out",
                        o.lora.c_str(), file.c_str()));
  const SafetensorsDType dtype =
      o.dtype == "bf16" ? SafetensorsDType::kBF16 : SafetensorsDType::kF32;
  if (o.lora == "adapter") return ExportAdapter(o, tc, file, dtype);
  ModelConfig model = tc.model;  // the exported model: merged, without adapters
  model.lora_rank = 0;
  CheckpointSummary summary;  // the training data's end-of-document id, where recorded
  TRAINER_RETURN_IF_ERROR(ReadCheckpointSummary(file, &summary));
  if (summary.eod_id >= model.vocab_size)  // the data's id is checked when training reads it
    return CheckpointError(
        StrFormat("%s: its eod_id attribute %lld is outside the model's vocabulary (vocab_size "
                  "%d), so config.json's eos_token_id would name no token: the file was edited "
                  "or damaged; export an earlier checkpoint",
                  file.c_str(), static_cast<long long>(summary.eod_id), model.vocab_size));
  std::string config_json;
  TRAINER_RETURN_IF_ERROR(
      HuggingFaceConfigJson(model, o.dtype == "bf16", summary.eod_id, &config_json));
  ExportedTokenizer tokenizer;
  if (!o.tokenizer_dir.empty()) {
    TRAINER_RETURN_IF_ERROR(ExportTokenizer(o.tokenizer_dir, model, summary.eod_id, &tokenizer));
    std::vector<std::string> targets;
    for (const auto& [from, name] : tokenizer.copies) targets.push_back(o.output + "/" + name);
    if (!tokenizer.tokenizer_config.empty()) targets.push_back(o.output + "/tokenizer_config.json");
    if (!tokenizer.reply_ends.empty()) targets.push_back(o.output + "/generation_config.json");
    TRAINER_RETURN_IF_ERROR(RefuseExisting(targets, o.output));
  }
  const std::vector<ParameterInfo> params = FullParameterList(model);
  ModelPartition whole;
  whole.num_layers = model.num_layers;
  std::vector<float> flat;
  if (tc.model.lora())
    TRAINER_RETURN_IF_ERROR(MergedLoraWeights(tc, file, &flat));
  else
    TRAINER_RETURN_IF_ERROR(ReadCheckpointWeights(file, model, params, whole, &flat));
  const std::vector<SafetensorsTensor> tensors = ToHuggingFace(model, params, flat);
  flat.clear();
  flat.shrink_to_fit();
  std::vector<std::string> files = HuggingFaceWeightFiles(tensors, dtype, max_shard_bytes);
  for (std::string& f : files) f = o.output + "/" + f;
  TRAINER_RETURN_IF_ERROR(MakeDirectories(o.output));
  TRAINER_RETURN_IF_ERROR(WriteHuggingFaceWeights(
      o.output, tensors, dtype, {{"format", "pt"}, {"source", file}}, max_shard_bytes, &files));
  TRAINER_RETURN_IF_ERROR(WriteFileAtomically(config, config_json));
  std::string tokenizer_names;
  const auto write = [&](const std::string& name, const std::string& text) {
    tokenizer_names += (tokenizer_names.empty() ? "" : ", ") + name;
    return WriteFileAtomically(o.output + "/" + name, text);
  };
  for (const auto& [from, name] : tokenizer.copies) {  // as they are, under Hugging Face's names
    TRAINER_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(from));
    TRAINER_RETURN_IF_ERROR(write(name, text));
  }
  if (!tokenizer.tokenizer_config.empty())
    TRAINER_RETURN_IF_ERROR(write("tokenizer_config.json", tokenizer.tokenizer_config));
  // A tokenizer with a chat template's end marker: generate() stops at the end of a reply too,
  // as the released instruct models' generation_config.json has it.
  if (!tokenizer.reply_ends.empty()) {
    std::string ids;
    for (const int64_t id : tokenizer.reply_ends) ids += std::to_string(id) + ", ";
    ids += std::to_string(tokenizer.eod);
    TRAINER_RETURN_IF_ERROR(
        write("generation_config.json", "{\n  \"eos_token_id\": [" + ids + "]\n}\n"));
  }
  int64_t count = 0;
  for (const SafetensorsTensor& t : tensors) count += static_cast<int64_t>(t.values.size());
  const std::string written =
      files.size() == 1
          ? "model.safetensors"
          : StrFormat("%zu shards and model.safetensors.index.json", files.size() - 1);
  std::cout
      << StrFormat(
             "exported %s: %zu tensors, %lld parameters (%s) to %s/%s and "
             "config.json%s; load with transformers.AutoModelForCausalLM.from_pretrained(\"%s\")",
             file.c_str(), tensors.size(), static_cast<long long>(count), o.dtype.c_str(),
             o.output.c_str(), written.c_str(),
             tokenizer_names.empty() ? ""
                                     : (" (and the tokenizer's " + tokenizer_names + ")").c_str(),
             o.output.c_str())
      << std::endl;
  return Status::Ok();
}

}  // namespace

int RunExportCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer export options");
  ExportOptions o;
  options.add_options()("output", po::value(&o.output)->default_value(""),
                        "folder for model.safetensors and config.json (made if missing)")(
      "dtype", po::value(&o.dtype)->default_value("f32"), "f32 or bf16 (rounded to nearest)")(
      "tokenizer-dir", po::value(&o.tokenizer_dir)->default_value(""),
      "also copy the tokenizer the data was packed with (a tokenizer.json and the files beside "
      "it, or GPT-2's vocab.json and merges.txt)")(
      "lora", po::value(&o.lora)->default_value(""),
      "a LoRA checkpoint: merge (adapters merged into the base: full weights) or adapter (a "
      "PEFT adapter folder: adapter_config.json, adapter_model.safetensors)")(
      "max-shard-size", po::value(&o.max_shard_size)->default_value("5GB"),
      "above this the weights go into model-0000K-of-0000N.safetensors shards and "
      "model.safetensors.index.json (KB/MB/GB: powers of 1000; KiB/MiB/GiB: of 1024)");
  RunContext ctx;
  int exit_code = 0;
  if (!StartCheckpointCommand("export",
                              "CHECKPOINT --output DIR [--dtype f32|bf16] [--tokenizer-dir DIR] "
                              "[--max-shard-size 5GB] [--lora merge|adapter]",
                              args, &options, &o.checkpoint, &o.overrides, &ctx, &exit_code))
    return exit_code;
  Status status = Status::Ok();
  if (o.output.empty())
    status = UsageError("trainer export needs --output DIR (the folder for model.safetensors)");
  // A file where the folder (or one above it) would be: name the flag, not the write that fails.
  for (std::string path = o.output; status.ok() && !path.empty() && path != "/" && path != ".";
       path = ParentDirectory(path))
    if (PathExists(path) && !IsDirectory(path))
      status =
          UsageError(StrFormat("--output %s: %s is a file, not a folder (trainer export "
                               "writes a Hugging Face folder). Give a folder's path",
                               o.output.c_str(), path.c_str()));
  std::string checkpoint;  // the file read
  if (status.ok())
    status =
        ExplainRemovedCheckpoint(Export(o, &ctx, &checkpoint), o.checkpoint, checkpoint, "export");
  return ctx.Finish(ctx.Agree(status));
}

}  // namespace trainer
