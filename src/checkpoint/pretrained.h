// Pretrained weights. Hugging Face's GPT-2 layout both ways (`trainer export`, `trainer inspect`,
// Checkpoint.init_from): transformers' names, its Conv1D matrices stored (in, out) where this
// trainer (as nanoGPT) stores (out, in), wte without the vocabulary's padding rows, lm_head tied.
// And the weights a fresh run starts from with Checkpoint.init_from, instead of the GPT-2
// initialisation: a trainer checkpoint (its weights only: not its optimizer state, step or data
// position), or a Hugging Face GPT-2 (a folder holding model.safetensors, or the file: tensor
// names with or without "transformer.", Conv1D matrices stored (in, out), F32, BF16 or F16; the
// causal-mask buffers and the tied lm_head are skipped), or a Hugging Face llama-family model
// (hf_llama.h, which the config.json beside the weights names). Whole or sharded weights
// (hf_folder.h). Each rank takes its own slices; a shape that does not fit the config's model is a
// checkpoint error naming the tensor and the key to set.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/hf_folder.h"
#include "checkpoint/safetensors.h"
#include "common/progress.h"
#include "common/status.h"
#include "config/train_config.h"
#include "model/gpt.h"
#include "model/parameters.h"

namespace trainer {

// Whole tensors (`params`: FullParameterList's, offsets into `flat`) as transformers' GPT-2
// stores them (for Model.arch=llama: the names and layout as they are, without the vocabulary's
// padding rows), and the config.json that goes with them.
std::vector<SafetensorsTensor> ToHuggingFace(const ModelConfig& model,
                                             const std::vector<ParameterInfo>& params,
                                             const std::vector<float>& flat);
// config.json for `model` (GPT2Config, or the llama family's LlamaConfig / Qwen2Config /
// Qwen3Config); bos/eos_token_id: `eod_id`, or vocab_size - 1 (trainer pack's bytes and GPT-2)
// when it is < 0.
Status HuggingFaceConfigJson(const ModelConfig& model, bool bf16, int64_t eod_id,
                             std::string* json);

// The Model keys that the Hugging Face weights `file` (HuggingFaceWeightsFile's) imply, as
// "-o Model.key=value ..." for Checkpoint.init_from. A llama-family model: every key from the
// config.json beside it (hf_llama.h's LlamaModelOverrides). A GPT-2: vocab_size, hidden_size,
// max_seq_len, num_layers and ffn_hidden_size from its tensor shapes (read from the header only),
// num_heads from the config.json beside it (the shapes do not show it; without one it is left out,
// and *note says so).
Status ImpliedModelOverrides(const std::string& file, std::string* overrides, std::string* note);

// This rank's slices (`part`, `params`: its parameter list) of the weights at `path`, as a flat
// f32 array in buffer order (padding zero). *what says which kind of file was read.
// LoRA: the base model a run's adapters apply to, as its checkpoints name it (the `lora_base`
// attribute): "Checkpoint.init_from=<path>", or "Global.seed=<n>" for the seed's initialisation.
std::string LoraBaseName(const TrainConfig& config);
// LoRA: the base as a checkpoint records it (`lora_base`): LoraBaseName, and for
// Checkpoint.init_from the file it resolves to now, absolute, with its fingerprint:
// "Checkpoint.init_from=ckpt (/abs/ckpt/step-00000300/checkpoint.h5, step 300, 1234 bytes)"
// (a Hugging Face model: "(/abs/hf/model.safetensors, 5678 bytes)"; sharded: the index file's).
// A relative path resolves against this process's folder, a checkpoint
// directory to its newest step.
Status LoraBaseIdentity(const TrainConfig& config, std::string* identity);

// The file that Checkpoint.init_from `path` names now: a Hugging Face weights file
// (HuggingFaceWeightsFile), or a trainer checkpoint's file (a checkpoint directory's newest
// step's); "" when it names none.
std::string ResolvePretrained(const std::string& path);
// What tells `file` (ResolvePretrained's) apart from other weights of its shape: a trainer
// checkpoint's step and weights CRC-32 (its size where it has no CRCs), a Hugging Face model's
// HuggingFaceWeightsFingerprint.
Status PretrainedFingerprint(const std::string& file, std::string* text);

// LoRA: the frozen base weights of `model` (its frozen_parameters()) from Checkpoint.init_from,
// or from Global.seed's initialisation without one; *what names the source. `progress`
// (optional): as PretrainedParameterValues.
Status LoadLoraBaseWeights(const TrainConfig& config, GptModel* model, std::string* what,
                           Progress* progress = nullptr);

// Where `path` (Checkpoint.init_from) is a Hugging Face model, that the config's model is its
// (architecture, and for the llama family every key of its config.json): the error names the
// keys and gives every override it needs. From the config files alone: a run checks it before
// its data. Anything else (a trainer checkpoint, nothing) passes here.
Status CheckPretrainedModelFits(const std::string& path, const ModelConfig& model);

// The weights that `path` (Checkpoint.init_from) holds for `params`: a Hugging Face folder or
// file, or a trainer checkpoint; *what names the source. `progress` (optional) is told of each
// tensor of a trainer checkpoint read, and before and after a Hugging Face file's.
Status PretrainedParameterValues(const std::string& path, const ModelConfig& model,
                                 const ModelPartition& part,
                                 const std::vector<ParameterInfo>& params, std::vector<float>* flat,
                                 std::string* what, Progress* progress = nullptr);

}  // namespace trainer
