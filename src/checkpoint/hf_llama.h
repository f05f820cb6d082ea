// The llama family (Model.arch=llama) as Hugging Face stores it: LlamaForCausalLM,
// Qwen2ForCausalLM (q/k/v biases) and Qwen3ForCausalLM (per-head q/k RMSNorm), and with experts
// the MoE classes whose keys and expert tensors hf_moe.h maps (Qwen2-MoE, Mixtral, OLMoE,
// Qwen3-MoE). The parameter
// names are transformers' own and the matrices (out, in) as nn.Linear stores them, so import and
// export copy tensors as they are; only the embedding and an untied lm_head differ, by the
// vocabulary's padding rows (exported without, imported zero). config.json is read in both forms
// (transformers 4: rope_theta, rope_scaling, torch_dtype; transformers 5: rope_parameters, dtype)
// and written in the first, which both read.
#pragma once

#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "config/train_config.h"
#include "model/parameters.h"

namespace trainer {

// The architecture config.json in `folder` names ("architectures"[0], else its model_type's class),
// "" when there is no config.json.
std::string HuggingFaceArchitecture(const std::string& folder);
// Ok where `folder` has no config.json or one that is JSON naming an architecture; else an error
// naming the file and what is wrong with it.
Status CheckConfigJsonNamesArchitecture(const std::string& folder);

// Whether `architecture` is one of the llama family's (the MoE classes included).
bool IsLlamaArchitecture(const std::string& architecture);

// The Model keys of the llama-family model whose config.json is `config_path`. Anything this
// trainer cannot compute as transformers does (another architecture or rope type, mlp_bias, an
// o_proj bias, sliding-window attention, heads not a multiple of the key/value heads, another
// dtype or activation) is a checkpoint error naming the key. `trained_length`: the
// Model.max_seq_len the weights will run at (0 when none is known), checked against a sliding
// window.
Status ReadLlamaConfigJson(const std::string& config_path, ModelConfig* model,
                           int trained_length = 0);

// `model`'s llama keys as "-o Model.arch=llama -o Model.vocab_size=... ...".
std::string LlamaModelOverrides(const ModelConfig& model);

// config.json for `model` (Model.arch=llama): LlamaForCausalLM, Qwen2ForCausalLM (qkv_bias) or
// Qwen3ForCausalLM (qk_norm), with experts the class of MoeExportClass (hf_moe.h); a usage error
// for both at once (no transformers class has q/k/v biases and q/k norms without an o_proj bias).
Status LlamaConfigJson(const ModelConfig& model, bool bf16, int64_t eod_id, std::string* json);

// The config.json beside the llama-family weights `weights` describes `model`: else a checkpoint
// error that names the key and gives every override the folder needs.
Status CheckLlamaConfigJsonFits(const std::string& weights, const ModelConfig& model);

// This rank's slices of the llama-family weights `weights` (HuggingFaceWeightsFile's) with the
// config.json beside them: the config's model must be the folder's (else a checkpoint error that
// names the key and gives every override the folder needs), every tensor present with its shape.
Status LlamaParameterValues(const std::string& weights, const ModelConfig& model,
                            const ModelPartition& part, const std::vector<ParameterInfo>& params,
                            std::vector<float>* flat, Progress* progress = nullptr);

}  // namespace trainer
