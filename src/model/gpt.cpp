// GptModel (gpt.h): buffers, parameter views, and the stage's forward and backward passes.
#include "model/gpt.h"

#include <algorithm>

#include "common/check.h"
#include "common/log.h"
#include "model/transformer_block.h"

namespace trainer {

GptModel::~GptModel() {
  for (Slot& s : slots_)
    for (BlockActivations* b : s.blocks) delete b;
  for (void* p : allocations_) backend_->Free(p);
  if (moe_host_staging_ != nullptr) backend_->FreeHost(moe_host_staging_);
}

Status GptModel::Create(const ModelConfig& config, const ModelPartition& partition,
                        Backend* backend, Communicator* tp, int micro_batch, int seq_len,
                        int num_slots, std::unique_ptr<GptModel>* out) {
  std::unique_ptr<GptModel> m(new GptModel());
  m->config_ = config;
  m->partition_ = partition;
  m->backend_ = backend;
  m->compute_ = backend->compute_dtype();
  m->tp_ = tp;
  m->B_ = micro_batch;
  m->T_ = seq_len;
  m->num_slots_ = num_slots;
  m->spec_ = MakeModelSpec(config);
  m->params_ = BuildParameterList(config, partition);
  m->layout_ = ShardLayout(m->params_, partition);
  m->block_backwards_.assign(static_cast<size_t>(partition.num_layers), 0);
  m->frozen_params_ = BuildFrozenParameterList(config, partition);
  if (m->SequenceParallel() && (micro_batch * seq_len) % partition.tp_size != 0)
    return UsageError(StrFormat(
        "Model.sequence_parallel splits the %d x %d tokens of a micro-batch over tp_degree=%d "
        "ranks, which does not divide them. Choose a micro_batch_size*seq_len divisible by %d",
        micro_batch, seq_len, partition.tp_size, partition.tp_size));
  TRAINER_RETURN_IF_ERROR(m->AllocateBuffers());
  if (!m->scratch_.zero_bias.empty()) TRAINER_RETURN_IF_ERROR(backend->Zero(m->scratch_.zero_bias));
  if (!m->rope_.empty()) {
    const std::vector<float> table = MakeRopeTable(m->spec_, m->rope_.dim(1));
    TRAINER_RETURN_IF_ERROR(
        backend->CopyToDevice(m->rope_.data, table.data(), table.size() * sizeof(float)));
  }
  // Views looked up once, so the step loop does no lookups.
  for (bool gradients : {false, true}) {
    EndTensors& e = gradients ? m->end_grads_ : m->ends_;
    auto get = [&](ParamRole role) { return gradients ? m->G(role) : m->P(role); };
    e.wte = get(ParamRole::kTokenEmbedding);
    e.wpe = get(ParamRole::kPositionEmbedding);
    e.lnf_w = get(ParamRole::kFinalNormWeight);
    e.lnf_b = get(ParamRole::kFinalNormBias);
    e.lm_head = m->spec_.tied_embeddings ? e.wte : get(ParamRole::kLmHead);
  }
  for (int i = 0; i < partition.num_layers; ++i) {
    m->layer_weights_.push_back(m->Weights(partition.first_layer + i, false));
    m->layer_grads_.push_back(m->Weights(partition.first_layer + i, true));
  }
  // ZeroGradients zeroes everything but the gradients that Backward's GEMMs write first: the
  // blocks' weight matrices and expert stacks (GroupedMatmulBackward writes zeros for the experts
  // without rows), and wte where the LM head is (elsewhere EmbeddingBackward adds to it).
  size_t zero_from = 0;
  for (const ParameterInfo& p : m->params_) {
    const bool lm_head =
        p.role == ParamRole::kLmHead || (p.role == ParamRole::kTokenEmbedding &&
                                         partition.last_stage() && m->spec_.tied_embeddings);
    // Adapters accumulate into their gradients (lora.cpp): zeroed like the biases.
    const bool adapter = p.role == ParamRole::kLoraA || p.role == ParamRole::kLoraB;
    const bool experts = p.role == ParamRole::kExpertGateUp || p.role == ParamRole::kExpertDown;
    const bool block_matrix = (p.local_shape.size() == 2 || experts) && p.layer >= 0 && !adapter;
    if (p.offset >= static_cast<size_t>(m->grad_buffer_.numel())) break;  // stage 2: buckets
    if (!lm_head && !block_matrix) continue;
    if (p.offset > zero_from) m->zeroed_gradient_spans_.emplace_back(zero_from, p.offset);
    zero_from = p.offset + static_cast<size_t>(p.local_numel());
  }
  const size_t flat = static_cast<size_t>(m->grad_buffer_.numel());
  if (flat > zero_from) m->zeroed_gradient_spans_.emplace_back(zero_from, flat);
  *out = std::move(m);
  return Status::Ok();
}

Tensor GptModel::Alloc(std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t(nullptr, dtype, shape);
  if (sizing_only_) {  // count, and hand out a placeholder that is never dereferenced
    sized_.*sizing_kind_ += Backend::AllocationSize(t.bytes());
    t.data = reinterpret_cast<void*>(Backend::AllocationSize(1));
    return t;
  }
  void* p = nullptr;
  Status s = backend_->Allocate(t.bytes(), &p);
  if (!s.ok()) {
    if (alloc_status_.ok()) alloc_status_ = s;
    return Tensor();
  }
  allocations_.push_back(p);
  t.data = p;
  return t;
}

ModelBufferBytes GptModel::BufferBytes(const ModelConfig& config, const ModelPartition& partition,
                                       DType compute_dtype, int micro_batch, int seq_len,
                                       int num_slots) {
  GptModel sizing;
  sizing.config_ = config;
  sizing.partition_ = partition;
  sizing.spec_ = MakeModelSpec(config);
  sizing.compute_ = compute_dtype;
  sizing.B_ = micro_batch;
  sizing.T_ = seq_len;
  sizing.num_slots_ = num_slots;
  sizing.params_ = BuildParameterList(config, partition);
  sizing.layout_ = ShardLayout(sizing.params_, partition);
  sizing.frozen_params_ = BuildFrozenParameterList(config, partition);
  sizing.sizing_only_ = true;
  Status ignored = sizing.AllocateBuffers();
  (void)ignored;
  return sizing.sized_;
}

namespace {
Tensor View(void* base, size_t offset, DType dtype, const std::vector<int64_t>& shape) {
  Tensor t;
  t.data = static_cast<char*>(base) + offset * DTypeSize(dtype);
  t.dtype = dtype;
  for (int64_t s : shape) t.shape[t.ndim++] = s;
  return t;
}
}  // namespace

// From ZeRO stage 3 a block's parameters live in one of the two gathered buffers, and from
// stage 2 its gradients in one of the two buckets (block i in buffer i % 2).
Tensor GptModel::Parameter(const ParameterInfo& p) const {
  if (layout_.stage() >= 3 && p.layer >= 0) {
    const int local = p.layer - partition_.first_layer;
    const size_t begin = layout_.units()[layout_.BlockUnit(local)].begin;
    return View(gathered_[local % 2].data, p.offset - begin, compute_, p.local_shape);
  }
  return View(param_buffer_.data, p.offset, param_buffer_.dtype, p.local_shape);
}
Tensor GptModel::Gradient(const ParameterInfo& p) const {
  if (layout_.stage() >= 2 && p.layer >= 0) {
    const int local = p.layer - partition_.first_layer;
    const size_t begin = layout_.units()[layout_.BlockUnit(local)].begin;
    return View(grad_bucket_[local % 2].data, p.offset - begin, DType::kF32, p.local_shape);
  }
  return View(grad_buffer_.data, p.offset, DType::kF32, p.local_shape);
}

const ParameterInfo* GptModel::Find(const std::string& name) const {
  for (const ParameterInfo& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const ParameterInfo* GptModel::Find(ParamRole role, int layer) const {
  for (const ParameterInfo& p : params_)
    if (p.role == role && p.layer == layer) return &p;
  return nullptr;
}

namespace {
// The view of `rows` rows of p's width from p's start (rows 0: p itself).
Tensor RowsFrom(const ParameterInfo& p, Tensor t, int64_t rows) {
  if (rows <= 0) return t;
  if (p.local_shape.size() == 1) return Tensor(t.data, t.dtype, {rows});
  return Tensor(t.data, t.dtype, {rows, p.local_shape[1]});
}
}  // namespace

Tensor GptModel::P(ParamRole role, int layer, int64_t rows) const {
  const ParameterInfo* p = Find(role, layer);
  if (p != nullptr) return RowsFrom(*p, Parameter(*p), rows);
  p = FindFrozen(role, layer);
  return p ? RowsFrom(*p, FrozenParameter(*p), rows) : Tensor();
}
Tensor GptModel::G(ParamRole role, int layer, int64_t rows) const {
  const ParameterInfo* p = Find(role, layer);
  return p ? RowsFrom(*p, Gradient(*p), rows) : FrozenGradientSink(role);
}

BlockActivations GptModel::AllocateBlockActivations(bool gelu_output, bool norm_outputs, bool moe,
                                                    bool dense) {
  const DType cd = compute_;
  const int64_t B = B_, T = T_, C = config_.hidden_size, tp = partition_.tp_size;
  const int64_t Fl = spec_.ffn / tp, heads = spec_.heads / tp, kv_heads = spec_.kv_heads / tp;
  const int64_t Ql = spec_.qkv_width() / tp, Al = spec_.q_width() / tp;
  const int64_t Pl = spec_.mlp == MlpKind::kSwiGlu ? 2 * Fl : Fl;  // the MLP's first linear
  const int64_t R = SequenceParallel() ? B * T / tp : B * T;
  const bool ln = spec_.norm == NormKind::kLayerNorm;
  BlockActivations a;
  if (norm_outputs) a.ln1_out = Alloc({B, T, C}, cd);
  if (ln) a.ln1_mean = Alloc({R}, DType::kF32);
  a.ln1_rstd = Alloc({R}, DType::kF32);
  if (spec_.qk_norm) {
    a.qkv_pre = Alloc({B, T, Ql}, cd);
    a.qkv_rstd = Alloc({B * T, spec_.qk_norm_full ? 2 : heads + kv_heads}, DType::kF32);
  }
  a.qkv = Alloc({B, T, Ql}, cd);
  a.att_out = Alloc({B, T, Al}, cd);
  a.att_stats = Alloc({B, heads, T}, DType::kF32);
  a.residual_mid = Alloc({R, C}, cd);
  if (norm_outputs) a.ln2_out = Alloc({B, T, C}, cd);
  if (ln) a.ln2_mean = Alloc({R}, DType::kF32);
  a.ln2_rstd = Alloc({R}, DType::kF32);
  if (dense) {
    a.fc_pre = Alloc({B, T, Pl}, cd);
    if (gelu_output) a.fc_out = Alloc({B, T, Fl}, cd);
  }
  if (moe) a.moe = AllocateMoeActivations(shared_.moe);
  a.residual_out = Alloc({R, C}, cd);
  AllocateLoraActivations(&a);
  return a;
}

Status GptModel::AllocateBuffers() {
  const DType cd = compute_;
  const int64_t B = B_, T = T_, N = B_ * T_, C = config_.hidden_size;
  const int tp = partition_.tp_size;
  const int64_t Fl = spec_.ffn / tp, Vl = config_.padded_vocab() / tp;
  const int64_t Ql = spec_.qkv_width() / tp, Al = spec_.q_width() / tp;
  const bool swiglu = spec_.mlp == MlpKind::kSwiGlu;
  const int64_t R = SequenceParallel() ? N / tp : N;  // rows of the residual stream here
  const int64_t total = static_cast<int64_t>(FlatBufferElements(params_, partition_.flat_shards));
  if (layout_.stage() >= 2) {
    TRAINER_RETURN_IF_ERROR(AllocateShardedBuffers(total));
  } else {
    sizing_kind_ = &ModelBufferBytes::parameters;
    param_buffer_ = Alloc({total}, cd);
    sizing_kind_ = &ModelBufferBytes::gradients;
    grad_buffer_ = Alloc({total}, DType::kF32);
  }
  sizing_kind_ = &ModelBufferBytes::parameters;
  AllocateLoraBuffers();  // the frozen weights with the parameters, the rest by kind
  sizing_kind_ = &ModelBufferBytes::activations;
  recompute_ = config_.recompute;
  // Model.recompute: "block" keeps only each block's output per slot (the rest is one shared set,
  // recomputed in backward); "gelu" shares the MLP activation's output (GELU or SwiGLU) of every
  // block (a MoE layer's too); "selective" shares that and the two norms' outputs (every
  // elementwise result that a GEMM reads, recomputed in backward from what the block keeps; a MoE
  // layer's permuted input too); "none" keeps all.
  const bool selective = recompute_ == "selective";
  // Which of this stage's layers are MoE layers.
  bool any_moe = false, any_dense = false;
  for (int l = 0; l < partition_.num_layers; ++l)
    (spec_.moe_layer(partition_.first_layer + l) ? any_moe : any_dense) = true;
  if (recompute_ == "block") shared_ = AllocateBlockActivations(true, true, any_moe, any_dense);
  if (recompute_ == "gelu" || selective) shared_.fc_out = Alloc({B, T, Fl}, cd);
  if (selective) shared_.ln1_out = Alloc({B, T, C}, cd);
  if (any_moe && recompute_ != "block") shared_.moe.out = Alloc({N, C}, cd);
  if (any_moe && (recompute_ == "gelu" || selective)) {
    // The MoE layers' SwiGLU output and (selective) permuted input, shared as fc_out is.
    const MoeSpec& e = spec_.moe;
    const int64_t K2 = e.router_rows() - e.num_experts + e.top_k;
    shared_.moe.act = Alloc({N * e.top_k * partition_.ep_size, e.ffn}, cd);
    if (selective) shared_.moe.x_perm = Alloc({N * K2, C}, cd);
  }
  moe_stats_.assign(partition_.num_layers, MoeLayerStats());
  slots_.resize(num_slots_);
  for (Slot& s : slots_) {
    s.tokens = Alloc({B, T}, DType::kI32);
    s.targets = Alloc({B, T}, DType::kI32);
    s.doc_starts = Alloc({B, T}, DType::kI32);
    s.input = Alloc({R, C}, cd);
    for (int l = 0; l < partition_.num_layers; ++l) {
      const bool moe = spec_.moe_layer(partition_.first_layer + l);
      BlockActivations* a = nullptr;
      if (recompute_ == "block") {
        a = new BlockActivations(shared_);
        if (!moe) a->moe = MoeActivations();
        a->residual_out = Alloc({R, C}, cd);
      } else {
        a = new BlockActivations(
            AllocateBlockActivations(recompute_ == "none", !selective, moe, !moe));
        if ((recompute_ == "gelu" || selective) && !moe) a->fc_out = shared_.fc_out;
        if (selective) a->ln1_out = a->ln2_out = shared_.ln1_out;
      }
      if (moe) {  // the slot's own routing, and the layer's stats
        dispatches_.push_back(std::make_unique<MoeDispatch>());
        a->moe.dispatch = dispatches_.back().get();
        a->moe.stats = &moe_stats_[l];
      }
      s.blocks.push_back(a);
    }
    if (partition_.last_stage()) {
      s.lnf_out = Alloc({N, C}, cd);
      if (spec_.norm == NormKind::kLayerNorm) s.lnf_mean = Alloc({R}, DType::kF32);
      s.lnf_rstd = Alloc({R}, DType::kF32);
    }
  }
  sizing_kind_ = &ModelBufferBytes::scratch;
  scratch_.proj = Alloc({B, T, C}, cd);
  scratch_.dresidual = Alloc({R, C}, cd);
  if (SequenceParallel()) {
    scratch_.rows = Alloc({R, C}, cd);
    scratch_.ln_rows = Alloc({R, C}, cd);
    scratch_.dres_all = Alloc({B, T, C}, cd);
  }
  scratch_.dln = Alloc({B, T, C}, cd);
  scratch_.dqkv = Alloc({B, T, Ql}, cd);
  scratch_.datt = Alloc({B, T, Al}, cd);
  scratch_.dfc = Alloc({B, T, swiglu ? 2 * Fl : Fl}, cd);
  if (swiglu) scratch_.dact = Alloc({B, T, Fl}, cd);
  if (any_moe) {
    scratch_.moe = AllocateMoeScratch();
    if (!sizing_only_) {  // the dispatch's copies' host memory (not the arena's)
      TRAINER_RETURN_IF_ERROR(
          backend_->AllocateHost(MoeHostStagingBytes(spec_.moe.num_experts), &moe_host_staging_));
      scratch_.moe.host_staging = moe_host_staging_;
    }
  }
  if (config_.hidden_dropout > 0) scratch_.ddrop = Alloc({B, T, C}, cd);
  if (spec_.norm == NormKind::kLayerNorm && !spec_.layernorm_bias) {
    scratch_.zero_bias = Alloc({C}, cd);
    scratch_.dbias_sink = Alloc({C}, DType::kF32);
  }
  if (spec_.position == PositionKind::kRope)
    rope_ = Alloc({2, config_.max_seq_len, spec_.head_dim / 2}, DType::kF32);
  if (partition_.last_stage()) {
    sizing_kind_ = &ModelBufferBytes::logits;
    const int64_t chunk = LossChunkRows(config_, partition_, cd, N);
    scratch_.logits = Alloc({chunk, Vl}, cd);
    scratch_.losses = Alloc({N}, DType::kF32);
    scratch_.row_max = Alloc({chunk}, DType::kF32);
    scratch_.sums = Alloc({2, chunk}, DType::kF32);
    scratch_.loss_sum = Alloc({1}, DType::kF64);
  }
  if (sizing_only_) return Status::Ok();
  if (!alloc_status_.ok()) return alloc_status_;
  for (void* p : allocations_)
    if (p == nullptr) return RuntimeError("model buffers: allocation failed");
  if (allocations_.size() < 2 || param_buffer_.empty() || grad_buffer_.empty() ||
      scratch_.dfc.empty() || (partition_.last_stage() && scratch_.sums.empty()))
    return RuntimeError(StrFormat(
        "out of memory allocating the model's buffers on %s (micro_batch %d, seq_len %d). "
        "Lower Global.micro_batch_size or enable Model.recompute",
        backend_->name().c_str(), B_, T_));
  return Status::Ok();
}

Status GptModel::SetParameters(const std::vector<float>& flat) {
  TRAINER_ASSERT(flat.size() == TotalLocalElements(params_), "flat parameter size mismatch");
  if (layout_.stage() >= 3) return SetShardedParameters(flat);
  return UploadCompute(backend_, param_buffer_.rows(0, static_cast<int64_t>(flat.size())),
                       flat.data());
}

Status UploadCompute(Backend* backend, Tensor dst, const float* host) {
  const size_t n = static_cast<size_t>(dst.numel());
  if (dst.dtype == DType::kF32) return backend->CopyToDevice(dst.data, host, n * sizeof(float));
  // Converted in blocks, so that the host holds one block beside `host` (an 8B model's bf16
  // weights whole would be 15 GiB more at setup).
  constexpr size_t kBlock = size_t{16} << 20;
  std::vector<uint16_t> converted(std::min(n, kBlock));
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t count = std::min(kBlock, n - begin);
    const float* from = host + begin;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) converted[i] = FloatToBF16(from[i]);
    TRAINER_RETURN_IF_ERROR(backend->CopyToDevice(static_cast<uint16_t*>(dst.data) + begin,
                                                  converted.data(), count * sizeof(uint16_t)));
  }
  return Status::Ok();
}

Tensor GptModel::StageInput(int slot) const {
  return slots_[slot].input;
}
Tensor GptModel::StageOutput(int slot) const {
  const Slot& s = slots_[slot];
  return s.blocks.empty() ? s.input : s.blocks.back()->residual_out;
}
Tensor GptModel::OutputGradient() const {
  return scratch_.dresidual;
}

BlockWeights GptModel::Weights(int layer, bool gradients) const {
  auto get = [&](ParamRole role, int64_t rows = 0) {
    return gradients ? G(role, layer, rows) : P(role, layer, rows);
  };
  const int64_t tp = partition_.tp_size, Ql = spec_.qkv_width() / tp, Fl = spec_.ffn / tp;
  BlockWeights w;
  w.ln1_w = get(ParamRole::kNorm1Weight);
  w.ln1_b = get(ParamRole::kNorm1Bias);
  // Llama's q, k and v (and gate and up) are stored one after the other: one local matrix.
  w.attn_w = spec_.fused_qkv ? get(ParamRole::kQkvWeight) : get(ParamRole::kQWeight, Ql);
  w.attn_b = spec_.fused_qkv ? get(ParamRole::kQkvBias) : get(ParamRole::kQBias, Ql);
  w.q_norm = get(ParamRole::kQNorm);
  w.k_norm = get(ParamRole::kKNorm);
  w.proj_w = get(ParamRole::kAttnOutWeight);
  w.proj_b = get(ParamRole::kAttnOutBias);
  w.ln2_w = get(ParamRole::kNorm2Weight);
  w.ln2_b = get(ParamRole::kNorm2Bias);
  w.fc_w =
      spec_.mlp == MlpKind::kGelu ? get(ParamRole::kFcWeight) : get(ParamRole::kGateWeight, 2 * Fl);
  w.fc_b = get(ParamRole::kFcBias);
  w.fcproj_w = get(ParamRole::kFcOutWeight);
  w.fcproj_b = get(ParamRole::kFcOutBias);
  if (spec_.moe_layer(layer)) {
    const MoeSpec& e = spec_.moe;
    w.moe.router = get(ParamRole::kRouterWeight, e.router_rows());
    w.moe.experts_gu = get(ParamRole::kExpertGateUp);
    w.moe.experts_down = get(ParamRole::kExpertDown);
    w.moe.shared_gu = get(ParamRole::kSharedGateWeight, 2 * e.shared_ffn);
    w.moe.shared_down = get(ParamRole::kSharedDownWeight);
    if (!gradients) w.moe.bias = get(ParamRole::kExpertBias);
  }
  SetLoraAdapters(layer, gradients, &w);
  return w;
}

BlockContext GptModel::Context() const {
  BlockContext ctx;
  ctx.backend = backend_;
  ctx.tp = tp_;
  ctx.ep = ep_;
  ctx.spec = &spec_;
  ctx.local_heads = static_cast<int>(spec_.heads / partition_.tp_size);
  ctx.local_kv_heads = static_cast<int>(spec_.kv_heads / partition_.tp_size);
  ctx.rope = rope_;
  ctx.sequence_parallel = SequenceParallel();
  ctx.scratch = {scratch_.proj,     scratch_.dln,  scratch_.dqkv,    scratch_.datt,
                 scratch_.dfc,      scratch_.dact, scratch_.rows,    scratch_.ln_rows,
                 scratch_.dres_all, scratch_.moe,  scratch_.ddrop};
  ctx.lora = LoraCtx();
  ctx.zero_bias = scratch_.zero_bias;
  ctx.dbias_sink = scratch_.dbias_sink;
  ctx.expert_grad_squares = expert_grad_squares_;
  return ctx;
}

Status GptModel::Forward(int slot, const int32_t* tokens, const int32_t* targets, bool with_loss,
                         float dloss_scale) {
  Slot& s = slots_[slot];
  const size_t token_bytes = static_cast<size_t>(B_) * T_ * sizeof(int32_t);
  if (partition_.first_stage()) {
    TRAINER_RETURN_IF_ERROR(backend_->CopyToDevice(s.tokens.data, tokens, token_bytes));
    const bool add_positions = partition_.tp_rank == 0;  // once, before the all-reduce
    const BlockContext ctx = Context(slot);
    // Vocabulary-parallel: each TP rank embeds the tokens of its rows of wte, then the sum.
    const Tensor embedded = SequenceParallel() ? scratch_.proj : s.input;
    TRAINER_RETURN_IF_ERROR(backend_->EmbeddingForward(
        embedded, s.tokens, ends_.wte, add_positions ? ends_.wpe : Tensor(), VocabStart()));
    Tensor summed;
    TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, embedded, &summed));
    if (ctx.hidden_dropout.on())  // the embeddings' sum, dropped on its way into s.input
      TRAINER_RETURN_IF_ERROR(backend_->Dropout(
          s.input, summed, Tensor(),
          HiddenDropoutKey(ctx, kDropoutEmbedding, -1, /*row_block=*/true, summed)));
    else if (summed.data != s.input.data)
      TRAINER_RETURN_IF_ERROR(
          backend_->CopyDeviceToDevice(s.input.data, summed.data, summed.bytes()));
  }
  BlockContext ctx = Context(slot);
  ctx.moe_loss_scale = dloss_scale == 0.f     ? 0.f
                       : moe_loss_scale_ > 0.f ? moe_loss_scale_
                                               : dloss_scale * static_cast<float>(B_) * static_cast<float>(T_);
  ctx.moe_record = dloss_scale != 0.f;  // training, not evaluation
  Tensor x = s.input;
  gathered_ahead_ = -1;
  for (int i = 0; i < partition_.num_layers; ++i) {
    ctx.layer = partition_.first_layer + i;
    TRAINER_RETURN_IF_ERROR(BeforeBlock(i, false));
    TRAINER_RETURN_IF_ERROR(BlockForward(ctx, layer_weights_[i], x, s.blocks[i]));
    x = s.blocks[i]->residual_out;
  }
  if (!partition_.last_stage()) return Status::Ok();
  return HeadForward(ctx, slot, x, with_loss ? targets : nullptr, dloss_scale);
}

Status GptModel::Backward(int slot, const std::function<Status(int)>& block_done) {
  Slot& s = slots_[slot];
  BlockContext ctx = Context(slot);
  ctx.recompute_norms = recompute_ == "selective";
  ctx.moe_recompute = true;
  if (recompute_ == "gelu" || recompute_ == "selective") ctx.mlp_act_source = SwiGluAct::kRemake;
  if (overwrite_weight_gradients_) ctx.weight_gradients = GradientWrite::kOverwrite;
  overwrite_weight_gradients_ = false;
  if (!expert_grad_squares_.empty() && ctx.weight_gradients != GradientWrite::kOverwrite)
    return RuntimeError(
        "GptModel::Backward: the experts' gradient squares are added as their gradients are "
        "written, once a step: a second backward in the step would count them again");
  Tensor dres = scratch_.dresidual;
  if (partition_.last_stage()) {
    if (last_forward_slot_ != slot)
      return RuntimeError(
          "GptModel::Backward: the last stage must run Backward(slot) right "
          "after Forward(slot) (the head's input gradient is shared)");
    Tensor x = StageOutput(slot);
    Tensor dln;  // the LM head's input gradient, which HeadForward left in scratch_.dln
    TRAINER_RETURN_IF_ERROR(ReduceRows(ctx, scratch_.dln, &dln));
    TRAINER_RETURN_IF_ERROR(backend_->Zero(dres));
    TRAINER_RETURN_IF_ERROR(NormBackward(ctx, dres, end_grads_.lnf_w, end_grads_.lnf_b, Tensor(),
                                         dln, x, ends_.lnf_w, s.lnf_mean, s.lnf_rstd));
  }
  gathered_ahead_ = -1;
  for (int i = partition_.num_layers - 1; i >= 0; --i) {
    TRAINER_RETURN_IF_ERROR(BeforeBlock(i, true));
    Tensor x = i == 0 ? s.input : s.blocks[i - 1]->residual_out;
    BlockActivations a = *s.blocks[i];
    ctx.layer = partition_.first_layer + i;
    if (recompute_ == "block") {  // the forward again, into the shared set
      a.residual_out = shared_.residual_out;
      TRAINER_RETURN_IF_ERROR(BlockForward(ctx, layer_weights_[i], x, &a));
    }  // (gelu, selective: BlockBackward makes the MLP's activation again, ctx.mlp_act_source)
    TRAINER_RETURN_IF_ERROR(BlockBackward(ctx, layer_weights_[i], layer_grads_[i], x, a, dres));
    TRAINER_RETURN_IF_ERROR(AfterBlockBackward(i));
    if (block_done) TRAINER_RETURN_IF_ERROR(block_done(i));
  }
  if (partition_.first_stage() && !config_.lora()) {  // LoRA: the embeddings are frozen
    // Every TP rank computes the (replicated) position-embedding gradient from the replicated
    // dres, so the replicas stay equal.
    const Tensor dres_all = SequenceParallel() ? scratch_.dres_all : dres;
    TRAINER_RETURN_IF_ERROR(GatherRows(ctx, dres, dres_all));
    if (ctx.hidden_dropout.on())  // the embeddings' dropout, on every row (the last use of it)
      TRAINER_RETURN_IF_ERROR(backend_->Dropout(
          dres_all, dres_all, Tensor(),
          HiddenDropoutKey(ctx, kDropoutEmbedding, -1, /*row_block=*/false, dres_all)));
    TRAINER_RETURN_IF_ERROR(backend_->EmbeddingBackward(end_grads_.wte, end_grads_.wpe, dres_all,
                                                        s.tokens, VocabStart()));
  }
  return Status::Ok();
}

Status GptModel::ZeroGradients() {
  for (const auto& [begin, end] : zeroed_gradient_spans_)
    TRAINER_RETURN_IF_ERROR(backend_->Zero(
        grad_buffer_.rows(static_cast<int64_t>(begin), static_cast<int64_t>(end - begin))));
  overwrite_weight_gradients_ = true;
  for (MoeLayerStats& st : moe_stats_) st.Clear();
  std::fill(block_backwards_.begin(), block_backwards_.end(), 0);
  return Status::Ok();
}

}  // namespace trainer
