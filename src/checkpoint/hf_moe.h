// Mixture-of-experts models (Model.num_experts > 0) as Hugging Face stores them, on top of the
// llama family's mapping (hf_llama.h): Qwen2MoeForCausalLM (Qwen1.5-MoE / Qwen2-MoE: q/k/v
// biases, a sigmoid-gated shared expert), MixtralForCausalLM (block_sparse_moe, experts w1/w3/w2
// = gate/up/down, every layer sparse), OlmoeForCausalLM (q/k RMSNorm over all heads together:
// Model.qk_norm_type=full, which needs as many key/value heads as heads; every layer sparse) and
// Qwen3MoeForCausalLM (per-head q/k RMSNorm).
//
// config.json: num_experts (Mixtral: num_local_experts), num_experts_per_tok,
// moe_intermediate_size (Mixtral, OLMoE: intermediate_size), shared_expert_intermediate_size,
// norm_topk_prob, output_router_logits with router_aux_loss_coef (moe_aux_loss_coeff when
// output_router_logits is true, else 0), and which layers are sparse: transformers' rule
// (layer not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0) is read as the
// moe_first_k_dense / moe_layer_freq pair that gives the same layers (refused when none does)
// and written as decoder_sparse_step 1 with the dense layers in mlp_only_layers. Routers are all
// a softmax over the experts then the top K (Mixtral: renormalised, the same as our top-K logits
// then a softmax); another scoring_func is refused; Mixtral's router_jitter_noise (training-only
// noise) is read with a warning that it is not applied.
//
// Tensors: each expert apart (model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight; Mixtral:
// block_sparse_moe.experts.E.{w1,w3,w2}.weight and block_sparse_moe.gate.weight), or stacked as
// transformers 5 holds them (mlp.experts.gate_up_proj (E, 2F, C), mlp.experts.down_proj
// (E, C, F): this trainer's own layout). Import stacks them, export writes them apart (what both
// transformers 4 and 5 load).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "checkpoint/hf_config.h"
#include "checkpoint/safetensors.h"
#include "common/status.h"
#include "config/train_config.h"
#include "model/parameters.h"

namespace trainer {

// Whether `architecture` is one of the MoE classes above.
bool IsMoeArchitecture(const std::string& architecture);

// The MoE keys of the config.json `r` reads (its class `architecture`) into `m`, whose dense
// llama keys are already read. What this trainer cannot compute as transformers does is a
// checkpoint error naming the key; `trained_length` (0: none) is the Model.max_seq_len the
// weights will run at, which Mixtral's sliding window must cover.
Status ReadMoeConfig(const ConfigReader& r, const std::string& architecture, int trained_length,
                     ModelConfig* m);

// `m`'s MoE keys as " -o Model.num_experts=... ..." ("" for a dense model).
std::string MoeModelOverrides(const ModelConfig& m);

// Where the config's MoE model `a` differs from the pretrained `b` in what the weights mean:
// "Model.key is A, the pretrained model's B", or "".
std::string MoeDifference(const ModelConfig& a, const ModelConfig& b);

// The transformers class a MoE model exports to, and its config.json keys.
struct HfMoeClass {
  std::string architecture, model_type;
  int intermediate_size = 0;  // config.json's intermediate_size (Mixtral: the experts')
  std::string keys;           // the MoE keys, JSON lines ending ",\n"
};
// OlmoeForCausalLM with Model.qk_norm_type=full, Qwen3MoeForCausalLM with the per-head
// Model.qk_norm, Qwen2MoeForCausalLM with a shared expert (and q/k/v biases), else
// MixtralForCausalLM (every layer sparse). A model none of them computes is a
// usage error saying which key stands in the way.
Status MoeExportClass(const ModelConfig& m, HfMoeClass* c);

// Import: the experts of every MoE layer of `m` in `tensors` (read from `weights`) stacked under
// this trainer's names, Mixtral's router renamed, and an expert bias (moe_router_bias_update_rate
// > 0) that the file lacks added as zeros. An expert missing, or held twice (apart and stacked,
// or under both namings), is a checkpoint error naming the file, the tensor, the layer and the
// expert.
Status StackHuggingFaceExperts(const std::string& weights, const ModelConfig& m,
                               std::map<std::string, SafetensorsTensor>* tensors);

// The name a folder of transformers' `architecture` gives parameter `p` where it differs from this
// trainer's (Mixtral's router: block_sparse_moe.gate.weight), else p.name.
std::string HuggingFaceName(const std::string& architecture, const ParameterInfo& p);

// Export: `p` (whole, `values`) as the exported class stores it, appended to `out`: a stacked
// expert tensor as E (or 2E) tensors, Mixtral's router under its name. False (nothing appended)
// for a parameter stored as it is.
bool AppendHuggingFaceMoeTensors(const ModelConfig& m, const ParameterInfo& p, const float* values,
                                 std::vector<SafetensorsTensor>* out);

}  // namespace trainer
