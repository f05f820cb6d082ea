// The model of a checkpoint in one process, for the subcommands that use a trained model
// (sample, eval, export): their common command line (CHECKPOINT, -o), which file a CHECKPOINT
// argument names, the checkpoint's own config with the user's overrides and a one-process
// layout, and the tokenizer files that go with the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_options.h"
#include "cli/run_context.h"
#include "common/status.h"
#include "config/train_config.h"
#include "data/bpe_tokenizer.h"

namespace trainer {

// The start of such a subcommand: adds the CHECKPOINT positional and -o overrides to `options`,
// starts `ctx` and parses `args`. False when the command is over (--help, a bad or missing
// argument, more than one process: every rank told), with its exit code in *exit_code.
bool StartCheckpointCommand(const char* command, const char* synopsis,
                            const std::vector<std::string>& args, po::options_description* options,
                            std::string* checkpoint, std::vector<std::string>* overrides,
                            RunContext* ctx, int* exit_code);

// The checkpoint file of a step folder, a checkpoint.h5, or a checkpoint directory (its newest
// committed step); `command` ("sample") names the subcommand in the error.
Status ResolveCheckpoint(const std::string& path, const char* command, std::string* file);

// A command's failure where the step that ResolveCheckpoint took from a checkpoint directory is
// gone since: the run writing there pruned it (Checkpoint.keep_last) while this command read it.
// Then that line (exit 4) instead of the reader's own ("does not exist", "does not verify").
// `given`: the CHECKPOINT argument; `file`: what ResolveCheckpoint made of it ("" if nothing).
Status ExplainRemovedCheckpoint(const Status& failed, const std::string& given,
                                const std::string& file, const char* command);
// That line for `file`, a step of checkpoint directory `directory`.
Status RemovedWhileRead(const std::string& file, const std::string& directory, const char* command);

// The config the checkpoint `file` carries, then `overrides`, then one process (no TP, PP or DP,
// no sequence parallelism) whose global batch is one micro-batch of `batch` sequences (> 0) or of
// the config's Global.micro_batch_size (0); validated for one rank. *step (when given): the step
// the checkpoint was saved at.
StatusOr<TrainConfig> OneProcessConfig(const std::string& file, std::vector<std::string> overrides,
                                       int batch, int64_t* step = nullptr);

// A mixture of experts with a capacity factor drops tokens within each micro-batch: a note for
// eval and sample that the result depends on the batch (`what`) and how to run dropless; "" for
// a dropless or dense model.
std::string CapacityNote(const ModelConfig& model, const std::string& what);

// A usage error when the tokenizer in `dir` (--tokenizer-dir), of `tokens` ids, has more than the
// model's vocabulary: another model's tokenizer, not the one its data was packed with.
Status CheckTokenizerFitsModel(const std::string& dir, int64_t tokens, const ModelConfig& model);

// The GPT-2 BPE files in `dir` (--tokenizer-dir) for a checkpoint's model: a usage error when
// they hold more tokens than the model's vocabulary (not the tokenizer its data was packed with),
// or naming every kind of tokenizer file export and sample take where `dir` holds none.
StatusOr<std::shared_ptr<const BpeVocabulary>> LoadModelTokenizer(const std::string& dir,
                                                                  const ModelConfig& model);

}  // namespace trainer
