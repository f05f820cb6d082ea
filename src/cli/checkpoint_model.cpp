// The model of a checkpoint in one process (checkpoint_model.h).
#include "cli/checkpoint_model.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_folder.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"
#include "config/config_diff.h"
#include "config/config_loader.h"

namespace trainer {

bool StartCheckpointCommand(const char* command, const char* synopsis,
                            const std::vector<std::string>& args, po::options_description* options,
                            std::string* checkpoint, std::vector<std::string>* overrides,
                            RunContext* ctx, int* exit_code) {
  SendInfoToStderr();  // stdout holds the command's result
  options->add_options()("checkpoint", po::value(checkpoint)->default_value(""),
                         "step folder, checkpoint.h5, or checkpoint directory (its newest step)")(
      "override,o", po::value(overrides)->composing(),
      "Section.key=value over the checkpoint's config (e.g. -o Global.device=cpu)");
  po::positional_options_description positional;
  positional.add("checkpoint", 1);
  Status status = ctx->Init();
  if (!status.ok()) {
    *exit_code = ctx->Finish(status);
    return false;
  }
  po::variables_map vm;
  bool help = false;
  status = ParseCommandLine(command, args, *options, &vm, &help, &positional);
  if (status.ok() && help) {
    PrintCommandHelp(command, synopsis, *options);
    *exit_code = ctx->Finish(Status::Ok());
    return false;
  }
  if (status.ok() && ctx->runtime->size() != 1)
    status = UsageError(StrFormat(
        "trainer %s runs as one process (this run has %d): start it without mpirun/srun -n",
        command, ctx->runtime->size()));
  if (status.ok() && checkpoint->empty())
    status = UsageError(
        StrFormat("trainer %s needs a checkpoint: trainer %s %s (CHECKPOINT: a step folder, its "
                  "checkpoint.h5, or a checkpoint directory)",
                  command, command, synopsis));
  if (status.ok()) return true;
  *exit_code = ctx->Finish(ctx->Agree(status));
  return false;
}

Status ResolveCheckpoint(const std::string& path, const char* command, std::string* file) {
  *file = FindCheckpointFile(path);
  if (!file->empty()) return Status::Ok();
  return CheckpointError(StrFormat(
      "no checkpoint at %s (trainer %s CHECKPOINT): pass a step folder, its checkpoint.h5, or "
      "a checkpoint directory (Checkpoint.dir, e.g. out/tiny-cpu/checkpoints).%s",
      path.c_str(), command, HuggingFaceFolderHint(path).c_str()));
}

StatusOr<TrainConfig> OneProcessConfig(const std::string& file, std::vector<std::string> overrides,
                                       int batch, int64_t* step) {
  CheckpointSummary summary;
  TRAINER_RETURN_IF_ERROR(ReadCheckpointSummary(file, &summary));
  for (const char* single :
       {"Distributed.tp_degree=1", "Distributed.pp_degree=1", "Distributed.dp_degree=1",
        "Distributed.ep_degree=1", "Distributed.pp_layers=[]", "Distributed.zero_stage1=false",
        "Distributed.sharding.sharding_degree=1", "Model.sequence_parallel=false"})
    overrides.push_back(single);
  TRAINER_ASSIGN_OR_RETURN(TrainConfig config,
                           LoadConfigText(summary.config_text, file + " (/config)", overrides));
  // Keys that earlier trainers took and ignored, now refused: a dense model's moe_* keys, RoPE
  // scaling settings without rope_scaling=llama3, rope_theta on a GPT-2. Read as their defaults,
  // as the saving run had them in effect; an override still comes last.
  std::vector<std::string> unused;
  if (!config.model.moe()) unused = DifferingKeys(config, TrainConfig(), "Model.moe_");
  if (config.model.rope_scaling == "none")
    for (const std::string& key : DifferingKeys(config, TrainConfig(), "Model.rope_"))
      if (key != "Model.rope_scaling" && (key != "Model.rope_theta" || config.model.arch == "gpt2"))
        unused.push_back(key);
  if (!unused.empty()) {
    std::vector<std::string> defaults = DefaultOverrides(unused);
    defaults.insert(defaults.end(), overrides.begin(), overrides.end());
    TRAINER_ASSIGN_OR_RETURN(config,
                             LoadConfigText(summary.config_text, file + " (/config)", defaults));
  }
  if (batch > 0) config.global.micro_batch_size = batch;
  config.global.global_batch_size = config.global.micro_batch_size;
  TRAINER_RETURN_IF_ERROR(ValidateConfig(&config, 1));
  if (step != nullptr) *step = summary.step;
  return config;
}

std::string CapacityNote(const ModelConfig& model, const std::string& what) {
  if (!model.moe() || model.moe_expert_capacity_factor <= 0) return "";
  return StrFormat(
      "note: Model.moe_expert_capacity_factor=%g drops tokens within each micro-batch, so %s. "
      "-o Model.moe_expert_capacity_factor=0 runs dropless, as Hugging Face models run\n",
      model.moe_expert_capacity_factor, what.c_str());
}

Status CheckTokenizerFitsModel(const std::string& dir, int64_t tokens, const ModelConfig& model) {
  if (tokens <= model.vocab_size) return Status::Ok();
  return UsageError(StrFormat(
      "the tokenizer in %s (--tokenizer-dir) has %lld tokens, more than the model's vocabulary "
      "of %d: it is another model's tokenizer. Give the one the training data was packed with",
      dir.c_str(), static_cast<long long>(tokens), model.vocab_size));
}

StatusOr<std::shared_ptr<const BpeVocabulary>> LoadModelTokenizer(const std::string& dir,
                                                                  const ModelConfig& model) {
  const auto has = [&](const char* name) { return PathExists(dir + "/" + name); };
  if (!has("tokenizer.json") && !has("tokenizer.model") &&
      !(has("vocab.json") && has("merges.txt")) && !(has("encoder.json") && has("vocab.bpe")))
    return UsageError(StrFormat(
        "no tokenizer in %s (--tokenizer-dir): expected a Hugging Face tokenizer.json (or a "
        "SentencePiece tokenizer.model), or GPT-2's vocab.json and merges.txt. Give the folder of "
        "the tokenizer the training data was packed with (trainer pack's --tokenizer-dir)",
        dir.c_str()));
  TRAINER_ASSIGN_OR_RETURN(std::shared_ptr<const BpeVocabulary> tokenizer,
                           BpeVocabulary::Load(dir, "--tokenizer-dir"));
  TRAINER_RETURN_IF_ERROR(CheckTokenizerFitsModel(dir, tokenizer->size(), model));
  return tokenizer;
}

Status RemovedWhileRead(const std::string& file, const std::string& directory,
                        const char* command) {
  return CheckpointError(StrFormat(
      "%s was removed while trainer %s read it: the run writing %s keeps only its newest steps "
      "(Checkpoint.keep_last). Run trainer %s again (it takes the newest step then), or name a "
      "step that the run keeps (Checkpoint.keep_every)",
      (EndsWith(file, "/checkpoint.h5") ? ParentDirectory(file) : file).c_str(), command,
      directory.c_str(), command));
}

Status ExplainRemovedCheckpoint(const Status& failed, const std::string& given,
                                const std::string& file, const char* command) {
  // A failure to read the checkpoint only (another one, such as eval's data, stands), of a step
  // taken from a directory (not named), gone since.
  if (failed.ok() || failed.code() != ExitCode::kCheckpoint || file.empty() ||
      file == CheckpointFile(given) || PathExists(file))
    return failed;
  return RemovedWhileRead(file, given, command);
}

}  // namespace trainer
