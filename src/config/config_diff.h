// What changed between two configs that matters to the numbers a run computes: for resuming a
// checkpoint with other settings than the run that saved it (Trainer::Resume warns).
#pragma once

#include <string>
#include <vector>

#include "config/train_config.h"

namespace trainer {

// "Section.key before -> after" for each key whose value differs, in FormatConfig's order,
// leaving out the keys that cannot change what a step computes beyond the summation order: where
// outputs go and how often to log, evaluate and save (Engine.output_dir, logging_freq, eval_freq,
// eval_iters, save_steps, watchdog_s, tensorboard, profile, peak_tflops, max_steps), the parallel
// layout (Distributed.*, Global.micro_batch_size, Model.recompute, Model.sequence_parallel), the
// validation data (Data.val_path) and the checkpoint folder's settings (Checkpoint.*). The
// decay length counts as changed only when its value in effect does (Optimizer.decay_steps 0
// means Engine.max_steps - Optimizer.warmup_steps; none with Optimizer.decay_style constant).
std::vector<std::string> ChangedSettings(const TrainConfig& before, const TrainConfig& after);

// The keys named `prefix`... ("Model.moe_") whose values differ between `a` and `b`, as
// "Section.key", in FormatConfig's order.
std::vector<std::string> DifferingKeys(const TrainConfig& a, const TrainConfig& b,
                                       const std::string& prefix);
// "Section.key=value" overrides setting each of `keys` to its default.
std::vector<std::string> DefaultOverrides(const std::vector<std::string>& keys);

// Every key of `config` as "Section.key: value", a line each in FormatConfig's order: the text
// the ranks of a run compare (RunContext::AgreeOnConfig).
std::string ConfigKeyLines(const TrainConfig& config);
// "Section.key: <mine> here, <theirs> on <where>" for each line that differs between two
// ConfigKeyLines texts (of the same key table), in their order (Distributed.dp_degree, which
// follows from the others unless set, last).
std::vector<std::string> DifferingKeyLines(const std::string& mine, const std::string& theirs,
                                           const std::string& where);

}  // namespace trainer
