// TrainConfig: the typed, resolved configuration of a run, in the sections of the YAML files
// (Global, Model, Distributed, Engine, Optimizer, Data, Checkpoint). Parsed and validated once
// (config_loader.h); everything else reads these plain structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/topology.h"

namespace trainer {

struct GlobalConfig {
  uint64_t seed = 1234;
  int global_batch_size = 8;    // sequences per optimizer step, over all DP ranks
  int micro_batch_size = 2;     // sequences per forward/backward on one rank
  std::string device = "auto";  // auto | cpu | cuda
};

// The most layers a model may have (Model.num_layers, a config.json's num_hidden_layers): the
// deepest released models have a few hundred; far more would only exhaust memory at setup.
constexpr int kMaxLayers = 10000;

struct ModelConfig {
  // gpt2 (learned positions, LayerNorm, GELU, biases) or llama (the Llama-3 / Qwen2 / Qwen3 /
  // SmolLM2 family: RMSNorm, RoPE, grouped-query attention, SwiGLU); model/model_spec.h.
  std::string arch = "gpt2";
  int vocab_size = 257;          // real vocabulary (byte tokenizer: 256 bytes + end-of-document)
  int vocab_pad_multiple = 128;  // the embedding/LM head hold vocab rounded up to this
  int hidden_size = 64;
  int num_layers = 2;
  int num_heads = 4;
  int ffn_hidden_size = 0;         // 0 means 4 * hidden_size
  int max_seq_len = 64;            // position embeddings; also the training sequence length
  int seq_len = 0;                 // training sequence length; 0 means max_seq_len
  std::string recompute = "none";  // none | gelu | block (GPU path)
  bool sequence_parallel = false;
  // Tokens of a micro-batch whose logits the LM head and loss hold at once (gpt_head.cpp):
  // 0 = auto (chunks of at most ~1 GiB of logits); B*T or more = the whole micro-batch at once.
  int loss_chunk_tokens = 0;
  // The llama family's keys (Hugging Face config.json names in docs/config.md).
  int num_kv_heads = 0;    // key/value heads; 0 means num_heads (no grouped-query attention)
  int head_dim = 0;        // 0 means hidden_size / num_heads
  double norm_eps = 1e-5;  // RMSNorm epsilon (rms_norm_eps); gpt2's LayerNorm uses 1e-5
  double rope_theta = 10000.0;
  std::string rope_scaling = "none";  // none | llama3
  double rope_factor = 8.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int rope_original_max_positions = 8192;
  bool qkv_bias = false;  // biases on q, k and v (Qwen2)
  bool qk_norm = false;   // RMSNorm of each q and k head before RoPE (Qwen3)
  // head: each head apart (Qwen3); full: all q heads as one vector, all k heads as another
  // (OLMoE's q_norm / k_norm of num_heads x head_dim)
  std::string qk_norm_type = "head";
  bool tie_embeddings = true;  // the LM head is the token embedding (tie_word_embeddings)
  // Mixture of experts (llama family; Megatron's flag names, docs/config.md maps them to Hugging
  // Face's): num_experts 0 means dense MLPs everywhere.
  int num_experts = 0;
  int moe_router_topk = 2;                      // experts per token
  int moe_ffn_hidden_size = 0;                  // each expert's intermediate size; 0: ffn_size()
  int moe_shared_expert_intermediate_size = 0;  // 0: no shared expert (Qwen2-MoE's, gated)
  int moe_layer_freq = 1;                       // layers with layer % n == 0 have experts
  int moe_first_k_dense = 0;                    // the first k layers stay dense
  std::string moe_router_score_function = "softmax";  // softmax | sigmoid
  bool moe_router_pre_softmax = true;  // softmax over all experts, then top-k (Qwen2-MoE, OLMoE)
  bool moe_norm_topk_prob = false;     // renormalise the chosen experts' weights to sum to 1
  double moe_aux_loss_coeff = 0.0;     // switch-style load-balancing loss
  std::string moe_router_load_balancing_type = "aux_loss";  // aux_loss | seq_aux_loss
  double moe_z_loss_coeff = 0.0;                            // router z-loss
  double moe_expert_capacity_factor = 0.0;                  // 0: dropless
  double moe_router_bias_update_rate = 0.0;  // DeepSeek-V3's aux-loss-free expert bias; 0: off
  // gpt2: biases in the linear layers and LayerNorms (nanoGPT's bias; false drops them all).
  bool bias = true;
  // Dropout probabilities in training (0: off): after each block's two output projections and on
  // the embeddings (hidden_dropout_prob / --hidden-dropout), and on the attention probabilities
  // (attention_probs_dropout_prob / --attention-dropout). Never in evaluation or sampling.
  double hidden_dropout = 0.0;
  double attention_dropout = 0.0;
  // LoRA fine-tuning (PEFT's LoraConfig: r, lora_alpha, lora_dropout, target_modules): the
  // model's weights frozen, low-rank adapters on the linears of lora_targets trained.
  int lora_rank = 0;                 // r; 0: off (every weight trains)
  double lora_alpha = 16;            // the adapters' output is scaled by lora_alpha / lora_rank
  double lora_dropout = 0.0;         // dropout on the adapters' input (training only)
  std::string lora_targets = "all";  // comma-separated: q,k,v,o,gate,up,down (gpt2:
                                     // c_attn,c_proj,c_fc); "all": every linear of the blocks

  int ffn_size() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  int sequence_length() const { return seq_len > 0 ? seq_len : max_seq_len; }
  // vocab_size rounded up to a multiple of vocab_pad_multiple; validation refuses one over
  // INT_MAX, so padded_vocab() is exact in a validated config.
  int64_t padded_vocab64() const {
    const int64_t m = vocab_pad_multiple > 0 ? vocab_pad_multiple : 1;
    return (static_cast<int64_t>(vocab_size) + m - 1) / m * m;
  }
  int padded_vocab() const { return static_cast<int>(padded_vocab64()); }
  int head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  bool moe() const { return num_experts > 0; }
  int moe_ffn_size() const { return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn_size(); }
  // Whether block `layer` has experts (DeepSeek's rule): not one of the first k dense layers, and
  // a multiple of moe_layer_freq.
  bool moe_layer(int layer) const {
    return moe() && layer >= moe_first_k_dense && layer % moe_layer_freq == 0;
  }
  bool lora() const { return lora_rank > 0; }
};

// Distributed.sharding (PaddleFleetX's keys): ZeRO stages over `sharding_degree` data ranks.
struct ShardingConfig {
  int sharding_degree = 1;        // data ranks sharing one copy of the sharded state
  int sharding_stage = 1;         // 1 optimizer state, 2 + gradients, 3 + parameters
  bool sharding_offload = false;  // master weights and moments in host memory, AdamW on the CPU
  bool reduce_overlap = true;     // gradient reduce-scatter during the backward pass (GPU stream)
  bool broadcast_overlap = true;  // stage 3: the next block's all-gather ahead of its use
};

struct DistributedConfig {
  int dp_degree = 0;  // 0 means world_size / (tp * pp * sharding_degree)
  int tp_degree = 1;  // alias mp_degree (PaddleFleetX)
  int pp_degree = 1;
  int ep_degree = 1;           // reserved for MoE: carved out of DP
  std::vector<int> pp_layers;  // layers per stage; empty means balanced
  bool zero_stage1 = false;    // alias: sharding over every data rank, stage 1 (resolved away)
  ShardingConfig sharding;
  // Data-parallel width for batching: replicas times sharding ranks.
  int data_parallel_size() const { return dp_degree * sharding.sharding_degree; }
  // The ZeRO stage in effect: 0 when nothing is sharded.
  int zero_stage() const { return sharding.sharding_degree > 1 ? sharding.sharding_stage : 0; }
  // GPU: the sharding group reduce-scatters and gathers during the backward pass (and stage 3's
  // forward) on a stream of its own.
  bool sharding_on_own_stream() const { return zero_stage() >= 2 && sharding.reduce_overlap; }
  // GPU: all-reduce each block's gradients over DP during the backward pass, on a stream of its
  // own (off by default: on one NVLink node it costs as much as it hides; docs/performance.md).
  bool overlap_grad_reduce = false;
  // GPU collectives: nccl, or mpi (staged through host memory over the MPI groups: slow, but
  // ranks may share a GPU; for debugging and for trying a layout on fewer GPUs than ranks).
  std::string gpu_collectives = "nccl";
  bool host_staged() const { return gpu_collectives == "mpi"; }
  // The rank grid of `world_size` ranks that these degrees make (every group derives from it).
  Topology topology(int world_size) const {
    Topology t;
    t.world_size = world_size;
    t.tp = tp_degree, t.pp = pp_degree, t.dp = data_parallel_size();
    t.sharding = sharding.sharding_degree, t.ep = ep_degree;
    return t;
  }
};

struct EngineConfig {
  int max_steps = 100;
  int logging_freq = 10;
  int eval_freq = 50;  // 0 disables evaluation
  int eval_iters = 4;  // validation batches (of Global.global_batch_size sequences) per evaluation
  int save_steps = 0;  // 0 disables periodic checkpoints
  std::string output_dir = "out";
  std::string mix_precision = "bf16";  // bf16 | fp32 (the CPU path is always fp32)
  double watchdog_s = 900;     // abort all ranks when a step makes no progress this long; 0: off
  bool tensorboard = true;     // also write the metrics as TensorBoard scalars
  bool profile = false;        // time the phases of each step (CUDA events) and report them
  double peak_tflops = 989.0;  // dense bf16 peak of one GPU, for MFU (H100/H200 SXM: 989)
  // Save and exit 75 at the first step boundary after the run has used this many minutes (since
  // the trainer started), so that a job ends with a fresh checkpoint before its time limit; 0: off.
  double exit_duration_min = 0;
  // GPU routes (docs/gpu.md): "auto" times the candidates of each shape; a routes file written
  // by a run (<output_dir>/gpu_routes.json) pins its choices. CPU ranks ignore it.
  std::string gpu_routes = "auto";
};

struct OptimizerConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 10;
  int decay_steps = 0;  // decay length after warmup; 0 means max_steps - warmup_steps
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  // After warmup: "cosine" or "linear" from lr to min_lr over the decay steps, or "constant" lr.
  std::string decay_style = "cosine";
  // With bf16 weights and the optimizer state on the GPU, unsharded: each f32 master weight kept
  // as the bf16 weight plus its low 16 bits (2 bytes a parameter less to hold and for each step
  // to move; the bf16 weights then round ties away from zero). Exact: the same master weights.
  bool store_param_remainders = true;
};

struct DataConfig {
  std::string train_path;     // files, comma-separated entries (paths or glob patterns)
  std::string train_weights;  // empty, or one weight per train_path entry (passes per epoch)
  std::string val_path;       // empty: hold out val_fraction of train_path's samples
  double val_fraction = 0.0;  // used only when val_path is empty
  // Each epoch cuts the training windows at another offset in [0, seq_len), drawn from the seed
  // and the epoch (as nanoGPT's random windows see other cuts each epoch); false: fixed windows.
  bool shift_windows = false;
  // How documents share a sample: "concat" (they run together, as GPT-2 and llm.c train) or
  // "documents" (alias "padding_free", ms-swift's and TRL's name; torchtune's packed=True):
  // attention stays inside each document, RoPE positions restart at each document's start, and
  // a document's last token is not trained to predict the next document's first.
  std::string packing = "concat";
  bool packed_documents() const { return packing == "documents" || packing == "padding_free"; }
};

struct CheckpointConfig {
  std::string dir;     // empty means <output_dir>/checkpoints
  int keep_last = 2;   // 0 keeps all
  int keep_every = 0;  // also keep every step that is a multiple of this; 0 disables
  std::string resume;  // "" (none), "auto" (latest committed) or a checkpoint folder
  // Weights for a fresh run (not a resume): a trainer checkpoint, or a Hugging Face model folder
  // (GPT-2, Llama, Qwen2, Qwen3; whole or sharded) or its weights file; "" initialises as GPT-2
  // does.
  std::string init_from;
  // Rank 0 writes and commits in a background thread while training goes on (the state is copied
  // to host memory and gathered to rank 0 at the save step); false: every rank waits for the write.
  bool async_save = true;
};

struct TrainConfig {
  GlobalConfig global;
  ModelConfig model;
  DistributedConfig distributed;
  EngineConfig engine;
  OptimizerConfig optimizer;
  DataConfig data;
  CheckpointConfig checkpoint;

  // Derived once by validation (ValidateConfig) from the world size.
  int world_size = 1;
  // Where the values came from, for error messages (set by LoadConfig; not keys, not printed).
  std::string config_path;                    // the YAML file; "" means defaults only
  std::vector<std::string> config_overrides;  // the -o Section.key=value overrides, in order
  // One-line notices from validation (an alias resolved), printed once by the train command.
  std::vector<std::string> notices;
  int gradient_accumulation_steps() const {
    return global.global_batch_size / (global.micro_batch_size * distributed.data_parallel_size());
  }
  std::string checkpoint_dir() const {
    return checkpoint.dir.empty() ? engine.output_dir + "/checkpoints" : checkpoint.dir;
  }
};

}  // namespace trainer
