// ModelSpec: the architecture as data. One decoder-only transformer, described by its parts (norm
// kind, attention shape, optional q/k/v bias and per-head q/k norm, position encoding, MLP kind,
// tied or untied embeddings), and every parameter it has: its role, its layer, its full shape,
// how tensor parallelism splits it and over which groups its gradient is summed. The layers,
// the checkpoint code and the Hugging Face import/export read this description; nothing parses
// parameter names.
//
// Two families, chosen by Model.arch:
// - gpt2: learned positions, LayerNorm with biases, fused c_attn, GELU MLP, tied LM head;
//   nanoGPT's parameter names. Model.bias: false (nanoGPT's bias=False) drops every bias: the
//   parameters do not exist, and the LayerNorms run with a constant zero bias.
// - llama: Llama-3.x, Qwen2/2.5, Qwen3 and SmolLM2 through keys: RMSNorm, RoPE (with Llama-3's
//   rope_scaling), grouped-query attention with an explicit head_dim, optional q/k/v bias
//   (Qwen2), optional per-head q/k RMSNorm (Qwen3), SwiGLU MLP, tied or untied embeddings;
//   Hugging Face's parameter names (model.layers.N.self_attn.q_proj.weight ...).
//   With Model.num_experts > 0, chosen layers replace the MLP by a mixture of SwiGLU experts
//   (Qwen2-MoE, Mixtral, OLMoE, Qwen3-MoE; moe_layer.h): a router, E experts stored as two stacked
//   tensors per layer, and an optional sigmoid-gated shared expert.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"

namespace trainer {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kSwiGlu };
enum class PositionKind { kLearned, kRope };

// What a parameter is, wherever it sits.
enum class ParamRole {
  kTokenEmbedding,     // (V, C); also the LM head when the embeddings are tied
  kPositionEmbedding,  // (maxT, C) learned positions
  kFinalNormWeight,
  kFinalNormBias,
  kLmHead,  // (V, C) untied LM head
  // Per block:
  kNorm1Weight,
  kNorm1Bias,
  kQkvWeight,  // gpt2: c_attn, (3C, C)
  kQkvBias,
  kQWeight,  // llama: (NH*HD, C), (NKV*HD, C), (NKV*HD, C); stored one after the other, so that
  kKWeight,  // this rank's q, k and v rows form one (local) qkv matrix
  kVWeight,
  kQBias,
  kKBias,
  kVBias,
  kQNorm,  // (HD) Qwen3; (NH*HD) and (NKV*HD) with qk_norm_full (OLMoE)
  kKNorm,
  kAttnOutWeight,  // (C, NH*HD)
  kAttnOutBias,
  kNorm2Weight,
  kNorm2Bias,
  kFcWeight,  // gpt2: c_fc (F, C)
  kFcBias,
  kGateWeight,  // llama: (F, C) and (F, C), stored one after the other: one (2F/tp, C) matrix
  kUpWeight,
  kFcOutWeight,  // (C, F): c_proj / down_proj
  kFcOutBias,
  // Mixture of experts (a MoE layer has these instead of the MLP's):
  kRouterWeight,           // (E, C) the router (Hugging Face's mlp.gate)
  kSharedExpertGateWeight, // (1, C) the shared expert's sigmoid gate, stored right after the router
  kExpertGateUp,           // (E, 2F, C): expert e's [gate; up] rows, contiguous per expert
  kExpertDown,             // (E, C, F)
  kSharedGateWeight,       // (Fs, C), (Fs, C) stored one after the other, (C, Fs)
  kSharedUpWeight,
  kSharedDownWeight,
  kExpertBias,  // (E) DeepSeek-V3's selection bias: no gradient, moved by the load (moe_layer.h)
  // LoRA adapters (lora.h), per block, of the linear named by ParameterSpec::lora_base:
  kLoraA,  // (r, in)
  kLoraB,  // (out, r)
};

// How the full tensor maps to the local shard over the TP group of size tp_size (or, for the
// experts, over the EP group).
enum class ShardKind {
  kReplicated,    // every TP rank holds the whole tensor
  kSplitRows,     // dim 0 split into tp_size contiguous blocks
  kSplitCols,     // dim 1 split into tp_size contiguous blocks (2-D only)
  kSplitQkvRows,  // dim 0 is [q; k; v], each third split into tp_size blocks (by heads)
  kSplitExperts,  // dim 0 (the expert) split into ep_size contiguous blocks over the EP group;
                  // replicated over TP
};

// Llama-3's rope_scaling (rope_type "llama3"): long wavelengths slowed by `factor`, short ones
// kept, a smooth blend between.
struct RopeScaling {
  std::string type = "none";  // none | llama3
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_positions = 8192;
};

enum class MoeScore { kSoftmax, kSigmoid };
enum class MoeAuxLoss { kMicroBatch, kSequence };

// The mixture-of-experts part of the model (Model.num_experts > 0); moe_layer.h computes it.
struct MoeSpec {
  int num_experts = 0;      // E; 0: no MoE layers
  int top_k = 0;            // K experts per token
  int64_t ffn = 0;          // F of each expert
  int64_t shared_ffn = 0;   // Fs of the shared expert, 0: none
  int layer_freq = 1;
  int first_k_dense = 0;
  MoeScore score = MoeScore::kSoftmax;
  // softmax only: true, softmax over all E then top-k (Qwen2-MoE, OLMoE); false, top-k of the
  // logits then softmax over the K chosen (Mixtral).
  bool pre_softmax = true;
  bool norm_topk_prob = false;  // the chosen weights renormalised to sum to 1
  double aux_loss_coeff = 0.0;
  MoeAuxLoss aux_loss = MoeAuxLoss::kMicroBatch;
  double z_loss_coeff = 0.0;
  double capacity_factor = 0.0;  // 0: dropless
  double bias_update_rate = 0.0;  // > 0: an expert bias shifts the choice, updated by the load
  bool enabled() const { return num_experts > 0; }
  int router_rows() const { return num_experts + (shared_ffn > 0 ? 1 : 0); }
};

struct ModelSpec {
  std::string arch = "gpt2";  // gpt2 | llama
  NormKind norm = NormKind::kLayerNorm;
  float norm_eps = 1e-5f;
  PositionKind position = PositionKind::kLearned;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  MlpKind mlp = MlpKind::kGelu;
  int64_t hidden = 0;    // C
  int64_t layers = 0;    // L
  int64_t heads = 0;     // NH
  int64_t kv_heads = 0;  // NKV (= NH without grouped-query attention)
  int64_t head_dim = 0;  // HD
  int64_t ffn = 0;       // F
  int64_t vocab = 0;     // real vocabulary
  int64_t padded_vocab = 0;
  int64_t max_positions = 0;
  bool fused_qkv = true;  // gpt2's c_attn; llama stores q, k, v apart
  bool qkv_bias = true;
  bool qk_norm = false;
  // OLMoE: one norm over the q heads together (weight NH*HD) and one over the k heads (NKV*HD =
  // NH*HD), computed as one head of that width; else per head (weight HD).
  bool qk_norm_full = false;
  bool linear_bias = true;     // biases of the attention output and the MLP's linears
  bool layernorm_bias = true;  // LayerNorm's bias (gpt2 with Model.bias: false has none)
  bool tied_embeddings = true;
  MoeSpec moe;
  // LoRA (Model.lora_*): rank 0 is off; the base roles of the adapted linears, in block order.
  int64_t lora_rank = 0;
  float lora_scale = 0.f;  // lora_alpha / lora_rank
  std::vector<ParamRole> lora_bases;

  // Whether block `layer` is a MoE layer (ModelConfig::moe_layer).
  bool moe_layer(int layer) const {
    return moe.enabled() && layer >= moe.first_k_dense && layer % moe.layer_freq == 0;
  }
  int64_t q_width() const { return heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
  int64_t qkv_width() const { return q_width() + 2 * kv_width(); }
  bool norm_bias() const { return norm == NormKind::kLayerNorm && layernorm_bias; }
};

ModelSpec MakeModelSpec(const ModelConfig& model);

// One parameter as the spec describes it (whole model: tp 1, pp 1).
struct ParameterSpec {
  std::string name;  // as checkpoints and Hugging Face name it
  ParamRole role;
  int layer = -1;  // block index, -1 outside the blocks
  std::vector<int64_t> full_shape;
  ShardKind shard = ShardKind::kReplicated;
  // Its gradient is summed over the TP group before the optimizer step: the q/k norms (each TP
  // rank sees its own heads) and, under sequence parallelism, the norms of the residual stream.
  bool grad_sum_over_tp = false;
  // Stored right before the next parameter with no padding between (q, k, v; gate, up).
  bool contiguous_with_next = false;
  bool weight_decay = true;  // matrices and embeddings; not biases and norm weights
  ParamRole lora_base = ParamRole::kTokenEmbedding;  // kLoraA/kLoraB: the linear adapted
};

// The parameters of blocks [first_layer, first_layer + num_layers) and of the ends this stage
// holds (the embeddings on the first stage, the final norm and LM head on the last; the tied
// embedding's copy on a last stage that is not the first), in the spec's order.
std::vector<ParameterSpec> SpecParameters(const ModelSpec& spec, bool sequence_parallel,
                                          int tp_size, bool first_stage, bool last_stage,
                                          int first_layer, int num_layers);

// The parameter name of `role` in block `layer` (-1 outside the blocks) for this architecture.
std::string ParameterName(const ModelSpec& spec, ParamRole role, int layer);

// Whether the role is a block's output projection (its initialisation is scaled by
// 1/sqrt(2 L), as GPT-2 and Megatron do).
bool IsResidualProjection(ParamRole role);
bool IsNormWeight(ParamRole role);

// Parameters counted in the model's FLOPs per token: every parameter but an untied input
// embedding (a lookup; tied, it is the LM head). GPT-2's position table counts, as nanoGPT's
// count has it.
bool CountsForFlops(const ModelSpec& spec, ParamRole role);

// Parameters that a token passes through: every one but an untied input embedding, the experts
// counted K/E (each token reaches K of the E).
double ActiveParameters(const ModelSpec& spec);
// Every parameter of the model.
double TotalParameters(const ModelSpec& spec);
// The MoE shape in one line ("8 experts, top-2, expert FFN 1024, shared expert FFN 2048; MoE
// layers 1-3 of 4; 0.52B active of 1.21B parameters"); "" for a dense model.
std::string MoeShapeText(const ModelSpec& spec);

// FLOPs per token of one training step (forward + backward) as PaLM counts them:
// 6 * active parameters + 12 * L * NH * HD * T. With LoRA the frozen weights cost 4 (no weight
// gradient) and the adapters 6 per parameter.
double TrainingFlopsPerToken(const ModelSpec& spec, int64_t seq_len);

// The RoPE table (2, positions, HD/2) f32: cos then sin of t * inv_freq[i], with Llama-3's
// frequency scaling when spec.rope_scaling.type is "llama3" (transformers'
// _compute_llama3_parameters).
std::vector<float> MakeRopeTable(const ModelSpec& spec, int64_t positions);

}  // namespace trainer
