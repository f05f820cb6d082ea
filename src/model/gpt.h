// GptModel: one pipeline stage of a decoder-only transformer as the model spec describes it
// (model_spec.h: GPT-2, or the Llama/Qwen family): token embedding (+ learned positions),
// pre-norm blocks with causal attention and an MLP, final norm, LM head (tied to the token
// embedding or its own), cross-entropy; written once against Backend, with Megatron-style tensor
// parallelism over the TP communicator (column/row-parallel linears, vocabulary-parallel
// embedding and loss).
//
// Activations live in `num_slots` slots so that a pipeline schedule can keep several
// micro-batches in flight. The last stage's Forward ends with the LM head's backward (gpt_head.cpp:
// the logits in chunks, never whole), leaving the head's input gradient in a shared buffer, so
// there Backward(slot) must follow Forward(slot) before the next Forward (true of 1F1B and of
// plain accumulation).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/communicator.h"
#include "model/backend.h"
#include "model/parameters.h"
#include "model/shard_layout.h"
#include "model/transformer_block.h"

namespace trainer {

// Upload a host f32 array into a compute-dtype tensor (converting to bf16 when needed).
Status UploadCompute(Backend* backend, Tensor dst, const float* host);

// Bytes of GptModel::Create's buffers by kind, each rounded as Backend::Allocate rounds it.
struct ModelBufferBytes {
  size_t parameters = 0;   // the compute-dtype copy of the weights
  size_t gradients = 0;    // f32
  size_t activations = 0;  // what the slots keep for backward (and the set shared by recompute)
  size_t logits = 0;       // last stage: one chunk's logits (their gradient in place), losses,
                           // row stats
  size_t scratch = 0;      // the backward's buffers, one set shared by every block and slot
  size_t total() const { return parameters + gradients + activations + logits + scratch; }
};

// Which masks a micro-batch's dropout draws (model/philox.h). Off by default: evaluation,
// sampling and export never set it.
struct DropoutDraw {
  bool on = false;
  uint64_t seed = 0;         // Global.seed
  uint32_t step = 0;         // the optimizer step being trained (1-based)
  int64_t first_sample = 0;  // the global-batch index of the micro-batch's first row
};

class GptModel {
 public:
  // micro_batch B and seq_len T fix the activation shapes. `tp` is the tensor-parallel group
  // (its memory space must match the backend's). Parameters start at zero: set them with
  // SetParameters (e.g. from InitialParameterValues, or a checkpoint).
  static Status Create(const ModelConfig& config, const ModelPartition& partition, Backend* backend,
                       Communicator* tp, int micro_batch, int seq_len, int num_slots,
                       std::unique_ptr<GptModel>* out);
  ~GptModel();

  // The buffers Create would allocate with these arguments on a backend of `compute_dtype`
  // (Backend::ReserveArena sizes its arena by them; `trainer plan` prints them).
  static ModelBufferBytes BufferBytes(const ModelConfig& config, const ModelPartition& partition,
                                      DType compute_dtype, int micro_batch, int seq_len,
                                      int num_slots);

  const ModelConfig& config() const { return config_; }
  const ModelPartition& partition() const { return partition_; }
  const std::vector<ParameterInfo>& parameters() const { return params_; }
  Backend* backend() const { return backend_; }
  // Flat buffers in parameter order: compute-dtype parameters and f32 gradients, of
  // FlatBufferElements(parameters(), partition().flat_shards) elements (zero past the last).
  // From ZeRO stage 2 on (gpt_sharding.cpp) the gradient buffer holds the tensors outside the
  // blocks only (unit 0), and from stage 3 on the parameter buffer too.
  Tensor parameter_buffer() const { return param_buffer_; }
  Tensor gradient_buffer() const { return grad_buffer_; }

  // ---- sharded storage (Distributed.sharding; gpt_sharding.cpp) ----
  const ShardLayout& shard_layout() const { return layout_; }
  // The sharding group: stage 3 gathers each block's parameters over it before use, stages 2
  // and 3 reduce-scatter each block's gradients over it after each backward.
  void set_shard_group(Communicator* group) { shard_ = group; }
  // The expert-parallel group (Distributed.ep_degree; partition().ep_size members): MoE layers
  // send their tokens' rows to the ranks holding the experts over it.
  void set_expert_group(Communicator* group) { ep_ = group; }
  // Stage 3: gather the next block's parameters while the current one computes.
  void set_prefetch(bool prefetch) { prefetch_ = prefetch; }
  // The MoE losses' weight in a training Forward: one micro-batch's share of the global batch
  // (B*T over its tokens). 0 (the default): dloss_scale * B * T, the same where the loss is the
  // mean over every token, but not where a loss mask (or packing) averages over fewer: the MoE
  // losses would then weigh more with every target masked out.
  void set_moe_loss_scale(float scale) { moe_loss_scale_ = scale; }
  // This rank's piece of unit u: the compute-dtype parameters that AdamW writes, and the summed
  // f32 gradients it reads (after the step's reduction).
  Tensor ParamPiece(int u) const;
  Tensor GradPiece(int u) const;
  // Unit u whole: where its parameters are gathered to after the step (empty for stage 3's
  // blocks, which are gathered before each use instead), and an f32 buffer of its size that is
  // free between steps (scratch for gathering optimizer state).
  Tensor ParamWhole(int u) const;
  Tensor GradScratch(int u) const;
  Tensor Parameter(const ParameterInfo& p) const;
  Tensor Gradient(const ParameterInfo& p) const;
  const ParameterInfo* Find(const std::string& name) const;
  // The parameter of `role` in block `layer` (-1 outside the blocks) on this rank, or nullptr.
  const ParameterInfo* Find(ParamRole role, int layer = -1) const;
  const ModelSpec& spec() const { return spec_; }

  // Forward of one micro-batch into `slot`. tokens/targets are host (B,T) arrays: tokens are used
  // on the first stage, targets on the last (with_loss). Non-first stages read StageInput(slot),
  // which the caller has filled. On the last stage with_loss computes the per-token losses and,
  // when `dloss_scale` != 0, their gradient scaled by it through the LM head: its weight gradient
  // and its input gradient (ready for Backward).
  Status Forward(int slot, const int32_t* tokens, const int32_t* targets, bool with_loss,
                 float dloss_scale);
  // The dropout of the micro-batch that the next Forward(slot) runs (and its Backward): with
  // draw.on and Model.hidden_dropout / attention_dropout > 0, masks keyed by the draw.
  void SetDropoutDraw(int slot, const DropoutDraw& draw) { slots_[slot].dropout = draw; }
  // Data.packing: documents: the (B,T) document starts (Backend::AttentionForward) of the
  // micro-batch that the next Forward(slot) runs, copied to the slot now; null: none (each
  // sample one sequence). Every stage needs them (gpt_micro_batch.cpp).
  Status SetDocumentStarts(int slot, const int32_t* doc_starts);
  // After a Forward on the last stage without TP: the logits of token row `row` (of B*T) over
  // the vocabulary (vocab_size values, the padding left out), as f32 on the host.
  Status LogitsRow(int64_t row, std::vector<float>* out);
  // Token rows of the micro-batch's `rows` that the head holds logits for at once
  // (Model.loss_chunk_tokens; 0: auto, chunks of at most ~1 GiB, 128-row multiples).
  static int64_t LossChunkRows(const ModelConfig& config, const ModelPartition& partition,
                               DType compute, int64_t rows);
  // Adds this micro-batch's per-token losses to the step's loss sum, which stays on the device
  // (last stage, after Forward with_loss; `first` starts a new sum). Nothing waits for the GPU.
  Status AccumulateLoss(bool first);
  // The loss sum so far (waits for the device).
  Status LossSum(double* out);
  // Backward of `slot`. Non-last stages read OutputGradient(), which the caller has filled; after
  // the call, non-first stages find d(StageInput) in OutputGradient() (same buffer, in place).
  // `block_done(i)`, when given, runs after block i (local index) is through its backward: the
  // gradients of its parameters are final for this call (the DP reduction starts there).
  Status Backward(int slot, const std::function<Status(int)>& block_done = nullptr);
  // Starts a step's gradients at zero: the gradients that the next Forward or Backward writes
  // first by a GEMM (the weight matrices, and the LM head's on the last stage) are overwritten
  // by it (beta = 0); the rest (biases, LayerNorms, embeddings written by EmbeddingBackward) are zeroed.
  Status ZeroGradients();
  // The MoE layers' figures of the step so far on this rank, by local layer index (empty stats
  // for a dense layer); ZeroGradients starts them again.
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_stats_; }
  // The MoE layers' expert weight gradients add the sums of their squares to `sum` (one f64) as
  // they are written, from the next Backward on (empty: not). Only where each expert stack's
  // gradient is written once a step and nothing changes it after: the step's gradient norm
  // then needs no pass over them (Trainer::FoldsExpertNorm). A Backward after the step's first
  // with a sum set fails.
  void AddExpertGradSquaresTo(Tensor sum) { expert_grad_squares_ = sum; }
  // Replace this rank's parameters from a host f32 flat array in buffer order (bf16: rounded to
  // nearest even). Not for a model whose AdamW keeps the master weights as halves
  // (AdamW::master_halves: the bf16 parameters are the masters' high halves): set those through
  // AdamW::SetMaster, which keeps both halves of each master together.
  Status SetParameters(const std::vector<float>& flat);

  // ---- LoRA (Model.lora_rank > 0, gpt_lora.cpp) ----
  // The frozen base weights of this rank (BuildFrozenParameterList; empty without LoRA): compute
  // dtype only, in a buffer of their own, no gradients and no optimizer state.
  const std::vector<ParameterInfo>& frozen_parameters() const { return frozen_params_; }
  Tensor FrozenParameter(const ParameterInfo& p) const;
  // Replace them from a host f32 flat array in their buffer order.
  Status SetFrozenParameters(const std::vector<float>& flat);
  // The frozen weights back to host f32 (exact: bf16 widens to f32 without rounding).
  Status FrozenParameterValues(std::vector<float>* flat) const;

  // The residual stream between stages: (B*T, C), or this rank's (B*T/tp, C) rows with
  // Model.sequence_parallel; compute dtype.
  Tensor StageInput(int slot) const;
  Tensor StageOutput(int slot) const;  // after the stage's last block
  Tensor OutputGradient() const;       // shared by all slots

 private:
  GptModel() = default;
  Status AllocateBuffers();
  Status AllocateShardedBuffers(int64_t flat);  // stage >= 2 (gpt_sharding.cpp)
  // Stage >= 2: before local block i's forward or backward (stage 3 gathers its parameters;
  // backward readies its gradient bucket), and after its backward (the bucket's reduce-scatter).
  Status BeforeBlock(int i, bool backward);
  Status AfterBlockBackward(int i);
  Status GatherBlock(int i);
  Status SetShardedParameters(const std::vector<float>& flat);  // stage 3
  // Without gelu_output: fc_out left empty; without norm_outputs: ln1_out and ln2_out. A MoE
  // layer's (moe) has the MoE layer's buffers instead of the MLP's; `dense` adds the MLP's.
  BlockActivations AllocateBlockActivations(bool gelu_output, bool norm_outputs = true,
                                            bool moe = false, bool dense = true);
  // gpt_moe.cpp: a MoE layer's activations (x_perm and act: those of `shared` where it has them),
  // and the MoE layers' backward scratch (with expert parallelism sized for the rows every EP
  // rank may send to this one).
  MoeActivations AllocateMoeActivations(const MoeActivations& shared);
  MoeScratch AllocateMoeScratch();
  Tensor Alloc(std::initializer_list<int64_t> shape, DType dtype);
  bool SequenceParallel() const { return config_.sequence_parallel && partition_.tp_size > 1; }
  // gpt_head.cpp: the final norm, the LM head and the loss (targets null: the norm only), in
  // chunks; the cross-entropy of one chunk of logits (n, V/tp) (targets, losses: its n rows).
  Status HeadForward(const BlockContext& ctx, int slot, Tensor x, const int32_t* targets,
                     float dloss_scale);
  Status CrossEntropy(Tensor logits, Tensor targets, Tensor losses, float dloss_scale);
  int VocabStart() const {
    return partition_.tp_rank * config_.padded_vocab() / partition_.tp_size;
  }
  BlockWeights Weights(int layer, bool gradients) const;
  BlockContext Context() const;
  // Context() with slot's dropout keys.
  BlockContext Context(int slot) const;
  // The parameter (its gradient) of `role`; with `rows` > 0, the view of `rows` local rows from
  // its start, across the contiguous parameters after it (q, k, v; gate, up).
  Tensor P(ParamRole role, int layer = -1, int64_t rows = 0) const;
  Tensor G(ParamRole role, int layer = -1, int64_t rows = 0) const;
  // LoRA (gpt_lora.cpp): the frozen weight of `role`; where the backward must write a frozen
  // norm's gradient (a sink nobody reads); the block's adapters; their buffers.
  const ParameterInfo* FindFrozen(ParamRole role, int layer) const;
  Tensor FrozenGradientSink(ParamRole role) const;
  void SetLoraAdapters(int layer, bool gradients, BlockWeights* w) const;
  void AllocateLoraActivations(BlockActivations* a);
  void AllocateLoraBuffers();
  LoraContext LoraCtx() const;

  ModelConfig config_;
  ModelSpec spec_;
  ModelPartition partition_;
  Backend* backend_ = nullptr;
  Communicator* tp_ = nullptr;
  int B_ = 0, T_ = 0, num_slots_ = 0;
  std::vector<ParameterInfo> params_;
  Tensor param_buffer_, grad_buffer_;
  std::vector<ParameterInfo> frozen_params_;  // LoRA: the base weights
  Tensor frozen_buffer_;                      // their compute-dtype values
  Tensor norm_sink_;                          // (2, max(C, HD)) f32: frozen norms' gradients
  LoraScratch lora_scratch_;
  std::vector<void*> allocations_;
  void* moe_host_staging_ = nullptr;  // MoeScratch::host_staging (Backend::AllocateHost)
  // Sharded storage (stage >= 2): this rank's shard of the gradients (and, stage 3, of the
  // parameters), two gradient buckets and (stage 3) two gathered blocks, used alternately.
  ShardLayout layout_;
  Communicator* shard_ = nullptr;
  Communicator* ep_ = nullptr;
  bool prefetch_ = true;
  float moe_loss_scale_ = 0.f;
  Tensor grad_shard_, param_shard_, grad_bucket_[2], gathered_[2];
  int gathered_ahead_ = -1;           // stage 3: the block whose gather is already issued
  std::vector<int> block_backwards_;  // backward passes through each local block this step
  DType compute_ = DType::kF32;       // the backend's compute dtype
  bool sizing_only_ = false;          // BufferBytes: Alloc counts instead of allocating
  ModelBufferBytes sized_;
  size_t ModelBufferBytes::*sizing_kind_ = &ModelBufferBytes::scratch;  // what Alloc counts into
  Status alloc_status_;                                    // the first failed allocation
  std::vector<BlockWeights> layer_weights_, layer_grads_;  // by local layer index
  // The embeddings and the final LayerNorm (empty where this stage does not hold them).
  // lm_head: the LM head's matrix on the last stage (wte when tied).
  struct EndTensors {
    Tensor wte, wpe, lnf_w, lnf_b, lm_head;
  } ends_, end_grads_;
  Tensor rope_;  // (2, max_seq_len, HD/2) f32 RoPE table, empty with learned positions

  struct Slot {
    Tensor tokens, targets;  // (B,T) i32 on the device
    Tensor doc_starts;       // (B,T) i32 on the device, used when `documents`
    bool documents = false;
    DocumentShape document_shape;  // the host's measure of doc_starts
    Tensor input;            // (B,T,C) residual stream entering the stage
    std::vector<BlockActivations*> blocks;
    Tensor lnf_out, lnf_mean, lnf_rstd;  // last stage
    DropoutDraw dropout;
  };
  std::vector<Slot> slots_;
  std::string recompute_;    // Model.recompute: none | gelu | block
  BlockActivations shared_;  // activations shared by every block and slot under recomputation
  struct Scratch {
    Tensor proj;       // (B,T,C) output of a row-parallel linear before its all-reduce
    Tensor dresidual;  // (B,T,C) gradient of the residual stream
    Tensor dln;        // (B,T,C); after the last stage's Forward, d(lnf_out)
    Tensor dqkv;       // (B,T,Q) (see BlockWeights)
    Tensor datt;       // (B,T,A)
    Tensor dfc;        // (B,T,F/tp); SwiGLU (B,T,2F/tp)
    Tensor dact;       // SwiGLU: (B,T,F/tp)
    Tensor logits;     // (chunk, V/tp): one chunk's logits, then their gradient (gpt_head.cpp)
    Tensor losses;     // (B,T) f32
    Tensor row_max;    // (chunk) f32
    Tensor sums;       // (2, chunk) f32
    Tensor loss_sum;   // (1) f64: the step's losses, summed over its micro-batches
    Tensor rows, ln_rows, dres_all;  // sequence parallelism (see BlockScratch)
    MoeScratch moe;                  // MoE layers' backward
    Tensor ddrop;                    // hidden dropout (see BlockScratch)
    Tensor zero_bias, dbias_sink;    // LayerNorm without bias (see BlockContext)
  } scratch_;
  std::vector<MoeLayerStats> moe_stats_;                 // by local layer
  std::vector<std::unique_ptr<MoeDispatch>> dispatches_;  // one per slot and MoE layer
  int last_forward_slot_ = -1;
  // [begin, end) element ranges of the gradient buffer that ZeroGradients zeroes.
  std::vector<std::pair<size_t, size_t>> zeroed_gradient_spans_;
  bool overwrite_weight_gradients_ = false;  // set by ZeroGradients, cleared by Backward
  Tensor expert_grad_squares_;               // AddExpertGradSquaresTo's sum
};

}  // namespace trainer
