// Trainer (trainer.h): setup and the step loop (its checkpoints: trainer_checkpoint.cpp).
#include "engine/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained.h"
#include "common/agree.h"
#include "common/gradient_clip.h"
#include "common/log.h"
#include "data/data_sources.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "engine/gpu_monitor.h"
#include "engine/memory_plan.h"
#include "engine/moe_metrics.h"
#include "engine/signals.h"
#include "optimizer/lr_schedule.h"

namespace trainer {
namespace {
// How long a requeued Slurm job waits for the checkpoint lock of its own earlier run (an NFS
// lock can outlive a failed node by the server's lease time, 90 s by default).
constexpr double kCheckpointLockWaitSeconds = 180.0;
}  // namespace

Trainer::Trainer(const TrainConfig& config, const ParallelGroups& groups, Backend* backend)
    : config_(config), groups_(groups), backend_(backend) {}

Trainer::~Trainer() = default;

Status Trainer::Setup() {
  const Topology& topo = groups_.topology;
  const Topology::Coord& c = groups_.coord;
  ModelPartition part =
      MakePartition(config_.model, config_.distributed, c.tp, c.pp, c.ep, groups_.topology.ep);
  if (part.flat_shards > 1) part.shard_rank = groups_.sharding->rank();
  const int micro = config_.gradient_accumulation_steps();
  // Cheap checks first: a pretrained model's config files (where they are read: a run without
  // --resume, or LoRA's frozen base; a resume takes its checkpoint's weights), then the data.
  if (!config_.checkpoint.init_from.empty() &&
      (config_.checkpoint.resume.empty() || config_.model.lora()))
    TRAINER_RETURN_IF_ERROR(AgreeOnStatus(
        groups_.world_host, CheckPretrainedModelFits(config_.checkpoint.init_from, config_.model)));
  TRAINER_RETURN_IF_ERROR(OpenData());
  // One arena for the model's buffers and the optimizer's state (what `trainer plan` prints).
  // Under ZeRO-1 (part.flat_shards > 1) the optimizer holds one piece of the flat buffers.
  const RankMemory memory =
      PlanRankMemory(config_, c.pp, backend_->compute_dtype(), backend_->device_memory());
  TRAINER_RETURN_IF_ERROR(backend_->ReserveArena(memory.arena()));
  planned_arena_ = memory.arena();
  if (backend_->device_memory()) planned_device_gib_ = memory.total() / (1024.0 * 1024.0 * 1024.0);
  TRAINER_RETURN_IF_ERROR(GptModel::Create(config_.model, part, backend_, groups_.tp,
                                           config_.global.micro_batch_size,
                                           config_.model.sequence_length(), memory.slots, &model_));
  model_->set_shard_group(groups_.sharding);
  TRAINER_RETURN_IF_ERROR(SetUpExpertParallel());
  model_->set_prefetch(config_.distributed.sharding.broadcast_overlap);
  // The MoE losses count each micro-batch's share of the global batch, whatever the loss mask.
  model_->set_moe_loss_scale(static_cast<float>(
      static_cast<double>(config_.global.micro_batch_size) * config_.model.sequence_length() /
      TokensPerStep()));
  TRAINER_RETURN_IF_ERROR(AdamW::Create(
      model_.get(), config_.optimizer, part.flat_shards > 1 ? groups_.sharding : nullptr,
      &optimizer_, config_.distributed.sharding.sharding_offload));
  if (optimizer_->offloaded())
    LogInfo(
        StrFormat("sharding_offload: master weights and Adam moments in host memory (%.1f MB "
                  "per rank with the staging ring), updated by AdamW on CPU threads",
                  memory.offloaded / 1e6));
  static const char* const kSharded[] = {"", "master weights and Adam moments",
                                         "gradients, master weights and Adam moments",
                                         "parameters, gradients, master weights and Adam moments"};
  if (part.flat_shards > 1)
    LogInfo(StrFormat(
        "sharding stage %d: %s sharded over %d ranks, %d replica(s); weights+grads+optimizer "
        "%.1f MB per rank (unsharded: %.1f MB)",
        part.zero_stage, kSharded[part.zero_stage], part.flat_shards, groups_.topology.replicas(),
        memory.state() / 1e6,
        PlanUnshardedState(config_, c.pp, backend_->compute_dtype(), backend_->device_memory()) /
            1e6));
  TRAINER_RETURN_IF_ERROR(PinGpuRoutes(config_.engine.gpu_routes, backend_));
  routes_ = std::make_unique<GpuRouteReport>(backend_, &groups_, config_.engine.output_dir);
  timer_ = std::make_unique<PhaseTimer>(backend_, false);
  pipeline_ = std::make_unique<PipelineStage>(model_.get(), topo.pp > 1 ? groups_.pp : nullptr);
  SetUpOverlappedReduction();
  const size_t tokens = static_cast<size_t>(micro) * config_.global.micro_batch_size *
                        config_.model.sequence_length();
  for (HostBatch& b : batches_) {
    b.inputs.assign(tokens, 0);
    b.targets.assign(tokens, 0);
    if (config_.data.packed_documents()) b.doc_starts.assign(tokens, 0);
  }
  const bool root = groups_.world_rank == 0;
  if (root) {  // first: a folder that another run writes to is left alone, metrics included
    const std::string& output = config_.engine.output_dir;
    const bool output_existed = PathExists(output);
    const auto claim = [&]() -> Status {
      TRAINER_RETURN_IF_ERROR(CheckOutputFolder(output));
      TRAINER_RETURN_IF_ERROR(LockCheckpointDirectory(
          config_.checkpoint_dir(), kCheckpointLockWaitSeconds, &checkpoint_lock_, progress_));
      if (!SameFolder(output, config_.checkpoint_dir()))  // one lock per folder
        TRAINER_RETURN_IF_ERROR(
            LockOutputDirectory(output, kCheckpointLockWaitSeconds, &output_lock_, progress_));
      // A run without --resume (or resuming another folder's step) in a folder of another run's
      // checkpoints would replace them.
      if (config_.checkpoint.resume.empty())
        TRAINER_RETURN_IF_ERROR(CheckNoEarlierCheckpoints(config_.checkpoint_dir()));
      return CheckResumeFolder(config_.checkpoint.resume, config_.checkpoint_dir());
    };
    const Status claimed = claim();
    // Refused: the output folder this run made goes again (rmdir: only while it is empty).
    if (!claimed.ok() && !output_existed) rmdir(output.c_str());
    TRAINER_RETURN_IF_ERROR(claimed);
  }
  TRAINER_RETURN_IF_ERROR(
      MetricsWriter::Open(config_.engine.output_dir, root, config_.engine.tensorboard, &metrics_));
  if (root) TRAINER_RETURN_IF_ERROR(RemoveIncompleteCheckpoints(config_.checkpoint_dir()));
  CreateCheckpointSaver();
  return Status::Ok();
}

namespace {

bool HasLossMask(const SampleSet& samples) {
  for (const SampleSet::Part& part : samples.parts())
    if (part.file->has_loss_mask()) return true;
  return false;
}

}  // namespace

Status Trainer::OpenData() {
  const int T = config_.model.sequence_length();
  // World rank 0 checks every token once; the others rely on ReadSamples' per-sample checks, so
  // no rank reads more than its own samples.
  DatasetOpenOptions options;
  options.scan_tokens = groups_.world_rank == 0;
  options.progress = progress_;
  auto opened = OpenDataSources(config_.data, config_.model.vocab_size, T, options);
  // The others wait for rank 0's scan (minutes for many files up to 1 GiB each).
  AwaitRoot(progress_, groups_.world_rank, "rank 0's check of every data token");
  TRAINER_RETURN_IF_ERROR(AgreeOnTrainingSet(opened.ok() ? &opened.value() : nullptr));
  if (!opened.ok()) return opened.status();
  data_ = std::move(opened.value());
  if (groups_.world_rank == 0)
    for (const std::string& warning : data_.warnings) LogWarning(warning);
  sampler_ = std::make_unique<GlobalSampler>(data_.train.num_samples(), config_.global.seed,
                                             data_.train_plan);
  const int64_t per_epoch = sampler_->num_samples();  // with Data.train_weights, its places
  TRAINER_RETURN_IF_ERROR(CheckTrainableData(data_, config_));
  std::string line = StrFormat("data: %lld training samples of %d tokens from %s",
                               static_cast<long long>(data_.train.num_samples()), T,
                               data_.train.Describe().c_str());
  if (!data_.train_plan.empty())
    line += StrFormat(", %lld an epoch by Data.train_weights %s", static_cast<long long>(per_epoch),
                      config_.data.train_weights.c_str());
  if (data_.val.num_samples() > 0)
    line +=
        StrFormat("; %lld validation samples from %s",
                  static_cast<long long>(data_.val.num_samples()), data_.val.Describe().c_str());
  train_masked_ = HasLossMask(data_.train);
  val_masked_ = HasLossMask(data_.val);
  if (train_masked_ || val_masked_)
    line += "; /loss_mask: the loss averages over the targets of mask 1 only";
  if (config_.data.packed_documents()) {  // targets at document starts are ignored too
    data_.train.EnableDocumentStarts();
    data_.val.EnableDocumentStarts();
    train_masked_ = val_masked_ = true;
    line += "; Data.packing=documents: attention and positions stay inside each document";
  }
  LogInfo(line);
  return Status::Ok();
}

Status Trainer::AgreeOnTrainingSet(const DataSources* sources) {
  // Each rank expands Data.train_path and Data.val_path itself and opens the files: a shard still
  // being written, a node whose view of the file system lags, or a node-local copy of other data
  // would give it other samples, silently. Every rank joins (a rank that failed to open its data
  // reports that through the caller's agreement, and compares nothing here).
  std::string mine;
  Status local = sources != nullptr ? DataFingerprint(*sources, &mine) : Status::Ok();
  std::string root = mine;
  TRAINER_RETURN_IF_ERROR(BroadcastText(groups_.world_host, &root));
  if (local.ok() && !mine.empty() && !root.empty() && root != mine)
    local = DataError(StrFormat(
        "rank %d sees other data than rank 0 (Data.train_path %s%s): %s here, %s on rank 0. "
        "Every rank must see the same files: put them on a file system that every node mounts "
        "alike, and finish writing shards before a run starts",
        groups_.world_rank, config_.data.train_path.c_str(),
        config_.data.val_path.empty() ? "" : (", Data.val_path " + config_.data.val_path).c_str(),
        mine.c_str(), root.c_str()));
  return AgreeOnStatus(groups_.world_host, local);
}

Status Trainer::ReadBatch(const std::vector<int64_t>& global_ids, int64_t first_position,
                          const SampleSet& samples, HostBatch* batch) {
  // Only the first stage needs inputs and only the last needs targets; both read the same rows.
  const ModelPartition& part = model_->partition();
  const bool documents = !batch->doc_starts.empty();  // every stage reads them
  if (!part.first_stage() && !part.last_stage() && !documents) return Status::Ok();
  const std::vector<int64_t> mine =
      GlobalSampler::DpSlice(global_ids, groups_.coord.dp, groups_.topology.dp);
  const int T = config_.model.sequence_length();
  std::vector<int64_t> shifts;  // Data.shift_windows: by each sample's place in the sample order
  if (first_position >= 0 && config_.data.shift_windows) {
    const int64_t first_mine = first_position + static_cast<int64_t>(global_ids.size()) *
                                                    groups_.coord.dp / groups_.topology.dp;
    for (size_t i = 0; i < mine.size(); ++i)
      shifts.push_back(sampler_->WindowShift(first_mine + static_cast<int64_t>(i), T));
  }
  const bool tokens = part.first_stage() || part.last_stage();
  TRAINER_RETURN_IF_ERROR(samples.ReadSamples(
      mine, T, tokens ? batch->inputs.data() : nullptr, tokens ? batch->targets.data() : nullptr,
      shifts, documents ? batch->doc_starts.data() : nullptr));
  batch->trained = 0;
  const bool masked = &samples == &data_.train ? train_masked_ : val_masked_;  // Setup's
  if (part.last_stage() && masked)
    for (size_t i = 0; i < mine.size() * config_.model.sequence_length(); ++i)
      batch->trained += batch->targets[i] >= 0;
  return Status::Ok();
}

void Trainer::StartPrefetch(int64_t consumed_samples) {
  HostBatch* next = &batches_[1 - current_];
  std::vector<int64_t> ids =
      sampler_->GlobalBatch(consumed_samples, config_.global.global_batch_size);
  prefetched_position_ = consumed_samples;
  prefetch_ = std::async(std::launch::async, [this, ids = std::move(ids), consumed_samples, next] {
    return ReadBatch(ids, consumed_samples, data_.train, next);
  });
}

void Trainer::JoinPrefetch() {
  if (prefetch_.valid()) prefetch_status_ = prefetch_.get();  // kept for TakeBatch
}

Status Trainer::TakeBatch(int64_t consumed_samples) {
  JoinPrefetch();
  const Status s = prefetch_status_;
  const bool usable = prefetched_position_ == consumed_samples;
  prefetch_status_ = Status::Ok();
  prefetched_position_ = -1;
  if (usable) {
    if (!s.ok()) return s;
    current_ = 1 - current_;
    return Status::Ok();
  }
  return ReadBatch(sampler_->GlobalBatch(consumed_samples, config_.global.global_batch_size),
                   consumed_samples, data_.train, &batches_[current_]);
}

Status Trainer::SetUpExpertParallel() {
  if (groups_.topology.ep <= 1) return Status::Ok();
  if (backend_->device_memory() && !config_.distributed.host_staged())
    return UsageError(
        "Distributed.ep_degree > 1 on GPUs runs over host-staged collectives in this version "
        "(NCCL's all-to-all is not validated on several GPUs yet). Set "
        "Distributed.gpu_collectives=mpi, Global.device=cpu, or Distributed.ep_degree=1 on GPUs");
  model_->set_expert_group(groups_.ep);
  // The flat buffer's runs of experts (neighbouring parameters of one kind; the padding between
  // them is zero).
  const std::vector<ParameterInfo>& params = model_->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].shard != ShardKind::kSplitExperts) continue;
    const size_t end = i + 1 < params.size() ? params[i + 1].offset
                                             : model_->shard_layout().flat_elements();
    if (!expert_runs_.empty() && expert_runs_.back().second == params[i].offset)
      expert_runs_.back().second = end;
    else
      expert_runs_.emplace_back(params[i].offset, end);
  }
  if (model_->partition().flat_shards <= 1)
    SplitByKind(0, model_->gradient_buffer(), &dense_grads_, &expert_grads_);
  return Status::Ok();
}

void Trainer::SplitByKind(size_t lo, const Tensor& rows, std::vector<Tensor>* dense,
                          std::vector<Tensor>* experts) const {
  // rows: flat elements [lo, lo + rows.numel()), cut where the runs of experts begin and end.
  const size_t hi = lo + static_cast<size_t>(rows.numel());
  auto take = [&](size_t a, size_t b, std::vector<Tensor>* out) {
    if (a < b)
      out->push_back(rows.rows(static_cast<int64_t>(a - lo), static_cast<int64_t>(b - a)));
  };
  size_t at = lo;
  for (const auto& [begin, end] : expert_runs_) {
    const size_t a = std::clamp(begin, lo, hi), b = std::clamp(end, lo, hi);
    take(at, a, dense);
    take(a, b, experts);
    at = std::max(at, b);
  }
  take(at, hi, dense);
}

void Trainer::SetUpOverlappedReduction() {
  // On GPUs the DP group has a stream of its own: each block's gradients are all-reduced as soon
  // as the last micro-batch's backward is through the block, while earlier blocks still compute.
  if (!config_.distributed.overlap_grad_reduce || groups_.topology.dp == 1 ||
      !groups_.dp->device_memory())
    return;
  compute_stream_ = BackendStream(backend_);
  const ModelPartition& part = model_->partition();
  buckets_.assign(static_cast<size_t>(part.num_layers), {});
  for (const ParameterInfo& p : model_->parameters()) {
    const bool in_block = p.layer >= 0;
    const int local = p.layer - part.first_layer;
    (in_block ? buckets_[static_cast<size_t>(local)] : tail_bucket_).push_back(model_->Gradient(p));
  }
  pipeline_->set_last_backward_hook([this](int block) {
    TRAINER_RETURN_IF_ERROR(groups_.dp->StartAfter(compute_stream_));
    return groups_.dp->AllReduceGroup(buckets_[static_cast<size_t>(block)], ReduceOp::kSum);
  });
}

Status Trainer::ReduceGradients() {
  if (optimizer_->sharded()) return ReduceShardedGradients();
  const Tensor grads = model_->gradient_buffer();
  if (compute_stream_ != nullptr) {  // the blocks' buckets are on their way: add the rest, wait
    TRAINER_RETURN_IF_ERROR(groups_.dp->StartAfter(compute_stream_));
    TRAINER_RETURN_IF_ERROR(groups_.dp->AllReduceGroup(tail_bucket_, ReduceOp::kSum));
    TRAINER_RETURN_IF_ERROR(groups_.dp->FinishBefore(compute_stream_));
  } else if (groups_.topology.ep > 1) {  // dense over DP, the experts over expert-DP
    TRAINER_RETURN_IF_ERROR(groups_.dp->AllReduceGroup(dense_grads_, ReduceOp::kSum));
    if (groups_.topology.expert_dp() > 1)
      TRAINER_RETURN_IF_ERROR(groups_.expert_dp->AllReduceGroup(expert_grads_, ReduceOp::kSum));
  } else if (groups_.topology.dp > 1) {
    TRAINER_RETURN_IF_ERROR(groups_.dp->AllReduce(grads.data, static_cast<size_t>(grads.numel()),
                                                  DType::kF32, ReduceOp::kSum));
  }
  return ReduceSharedParameterGradients();
}

Status Trainer::ReduceShardedGradients() {
  // Stage 1 reduce-scatters the whole buffer here; stages 2 and 3 did the blocks during the
  // backward pass and add the tensors outside them. The whole-tensor sums over TP and the
  // embedding group come first, since the reduce-scatter leaves each rank only its pieces.
  const ShardLayout& layout = model_->shard_layout();
  const bool blocks_done = layout.stage() >= 2;
  void* stream = BackendStream(backend_);
  TRAINER_RETURN_IF_ERROR(ReduceSharedParameterGradients(blocks_done));
  TRAINER_RETURN_IF_ERROR(groups_.sharding->StartAfter(stream));
  TRAINER_RETURN_IF_ERROR(optimizer_->ReduceScatterGradients(0, model_->gradient_buffer()));
  TRAINER_RETURN_IF_ERROR(groups_.sharding->FinishBefore(stream));
  // The blocks' sums over TP, on this rank's pieces (TP peers hold the same pieces).
  for (const ParameterInfo& p : model_->parameters()) {
    if (!blocks_done || !p.grad_sum_over_tp || p.layer < 0) continue;
    Status status;
    layout.ForEachOwned(p.offset, p.offset + static_cast<size_t>(p.local_numel()),
                        [&](int u, size_t at, size_t, size_t n) {
                          const Tensor piece = model_->GradPiece(u);
                          const int64_t local = static_cast<int64_t>(at - layout.piece_begin(u));
                          if (status.ok())
                            status = groups_.tp->AllReduce(piece.rows(local, 1).data, n,
                                                           DType::kF32, ReduceOp::kSum);
                        });
    TRAINER_RETURN_IF_ERROR(status);
  }
  // Hybrid: each shard summed over its replicas (the sharding groups of the other replicas); with
  // EP the experts' pieces only over the replicas that hold the same experts (expert-DP).
  if (groups_.topology.replicas() == 1) return Status::Ok();
  std::vector<Tensor> dense, experts;
  for (int u = 0; u < static_cast<int>(layout.units().size()); ++u)
    SplitByKind(layout.piece_begin(u), model_->GradPiece(u), &dense, &experts);
  TRAINER_RETURN_IF_ERROR(groups_.replica->AllReduceGroup(dense, ReduceOp::kSum));
  if (groups_.topology.expert_dp() == 1 || experts.empty()) return Status::Ok();
  return groups_.expert_dp->AllReduceGroup(experts, ReduceOp::kSum);
}

Status Trainer::ReduceSharedParameterGradients(bool outside_blocks_only) {
  for (const ParameterInfo& p : model_->parameters()) {  // LayerNorms under sequence parallelism
    if (!p.grad_sum_over_tp || (outside_blocks_only && p.layer >= 0)) continue;
    Tensor g = model_->Gradient(p);
    TRAINER_RETURN_IF_ERROR(
        groups_.tp->AllReduce(g.data, static_cast<size_t>(g.numel()), DType::kF32, ReduceOp::kSum));
  }
  // The tied token embedding on the first and last stage (an untied model has no copy).
  const ParameterInfo* wte = model_->Find(ParamRole::kTokenEmbedding);
  if (groups_.embedding != nullptr && model_->spec().tied_embeddings && wte != nullptr) {
    Tensor g = model_->Gradient(*wte);
    TRAINER_RETURN_IF_ERROR(groups_.embedding->AllReduce(g.data, static_cast<size_t>(g.numel()),
                                                         DType::kF32, ReduceOp::kSum));
  }
  return Status::Ok();
}

Status Trainer::GlobalGradNorm(double* norm) {
  double sum = 0.0;
  // With EP the experts of the other EP ranks of expert-DP index 0 count too (once each).
  const Topology::Coord& c = groups_.coord;
  const bool experts_only = groups_.topology.ep > 1 && c.replica != 0 && c.edp == 0;
  TRAINER_RETURN_IF_ERROR(optimizer_->QueueLocalGradNormSquared(experts_only));
  TRAINER_RETURN_IF_ERROR(optimizer_->QueuedGradNormSquared(&sum));
  // Canonical parameters are disjoint over TP x PP and equal over DP: sum over one DP replica,
  // or when sharded over every sharding rank's pieces of one replica.
  const bool counted = (optimizer_->sharded() ? c.replica == 0 : c.dp == 0) || experts_only;
  double total = counted ? sum : 0.0;
  TRAINER_RETURN_IF_ERROR(groups_.world_host->AllReduce(&total, 1, DType::kF64, ReduceOp::kSum));
  *norm = std::sqrt(total);
  return Status::Ok();
}

Status Trainer::ShareLastStageValue(double* value) {
  // Sum over DP on the last stage, then every stage takes the last stage's value.
  const bool last = model_->partition().last_stage();
  double v = last ? *value : 0.0;
  TRAINER_RETURN_IF_ERROR(groups_.world_host->AllReduce(&v, 1, DType::kF64, ReduceOp::kSum));
  // Every TP rank of the last stage holds the same loss: count one TP rank.
  *value = v / groups_.topology.tp;
  return Status::Ok();
}

double Trainer::TokensPerStep() const {
  return static_cast<double>(config_.global.global_batch_size) * config_.model.sequence_length();
}

bool Trainer::NormOnDevice() const {
  return !optimizer_->sharded() && !optimizer_->offloaded() && groups_.topology.tp == 1 &&
         groups_.topology.pp == 1 && groups_.topology.ep == 1;
}

bool Trainer::FoldsExpertNorm() const {
  // Each expert stack's gradient written once (one micro-batch), and never summed over ranks.
  return NormOnDevice() && config_.model.moe() && !config_.model.lora() &&
         config_.gradient_accumulation_steps() == 1 && groups_.topology.dp == 1;
}

Status Trainer::TrainStep(double* lr) {
  const int B = config_.global.micro_batch_size, T = config_.model.sequence_length();
  const int GB = config_.global.global_batch_size;
  TRAINER_RETURN_IF_ERROR(timer_->BeginStep());
  TRAINER_RETURN_IF_ERROR(TakeBatch(state_.consumed_samples));
  StartPrefetch(state_.consumed_samples + GB);
  TRAINER_RETURN_IF_ERROR(model_->ZeroGradients());
  TRAINER_RETURN_IF_ERROR(timer_->Charge(Phase::kData));
  MicroBatches mb;
  mb.count = config_.gradient_accumulation_steps();
  mb.batch = B;
  mb.seq_len = T;
  mb.inputs = batches_[current_].inputs.data();
  mb.targets = batches_[current_].targets.data();
  if (!batches_[current_].doc_starts.empty()) mb.doc_starts = batches_[current_].doc_starts.data();
  // Dropout masks keyed by the step and the sample's place in the global batch (this rank's DP
  // block starts where DpSlice cuts it), the same in every layout.
  mb.dropout.on = true;
  mb.dropout.seed = config_.global.seed;
  mb.dropout.step = static_cast<uint32_t>(state_.step + 1);
  mb.dropout.first_sample =
      static_cast<int64_t>(GB) * groups_.coord.dp / std::max(1, groups_.topology.dp);
  const double tokens = TokensPerStep();
  double trained = tokens;  // the loss and gradient average over these targets
  if (train_masked_) {      // those of mask 1 in the whole global batch (at least 1)
    trained = model_->partition().last_stage() ? batches_[current_].trained : 0.0;
    TRAINER_RETURN_IF_ERROR(ShareLastStageValue(&trained));
    trained = std::max(trained, 1.0);
  }
  step_trained_ = trained;
  // Where it can, the norm's sum takes the experts' squares as their gradients are written.
  Tensor expert_squares;
  const bool fold = FoldsExpertNorm();
  if (fold) TRAINER_RETURN_IF_ERROR(optimizer_->StartGradNormSquared(&expert_squares));
  model_->AddExpertGradSquaresTo(expert_squares);
  TRAINER_RETURN_IF_ERROR(
      pipeline_->TrainStep(mb, static_cast<float>(1.0 / trained), timer_.get()));
  model_->AddExpertGradSquaresTo(Tensor());  // this step's only
  TRAINER_RETURN_IF_ERROR(ReduceGradients());
  TRAINER_RETURN_IF_ERROR(timer_->Charge(Phase::kGradReduce));
  const double clip = config_.optimizer.grad_clip;
  const int step = static_cast<int>(state_.step + 1);
  *lr = LearningRate(config_.optimizer, config_.engine.max_steps, step);
  if (NormOnDevice()) {  // the norm and the clipping scale stay on the GPU
    TRAINER_RETURN_IF_ERROR(optimizer_->QueueLocalGradNormSquared(false, fold));
    TRAINER_RETURN_IF_ERROR(optimizer_->StepClippedOnDevice(step, *lr, clip));
  } else {  // the norm needs a sum over ranks: the host waits for it
    TRAINER_RETURN_IF_ERROR(GlobalGradNorm(&host_grad_norm_));
    TRAINER_RETURN_IF_ERROR(optimizer_->Step(step, *lr, GradientClipScale(host_grad_norm_, clip)));
  }
  if (config_.model.moe_router_bias_update_rate > 0)
    TRAINER_RETURN_IF_ERROR(UpdateExpertBias(
        *model_, groups_, config_.model.moe_router_bias_update_rate, optimizer_.get()));
  TRAINER_RETURN_IF_ERROR(timer_->Charge(Phase::kOptimizer));
  TRAINER_RETURN_IF_ERROR(timer_->EndStep());
  state_.step = step;
  state_.consumed_samples += GB;
  state_.tokens_seen += static_cast<int64_t>(tokens);
  return Status::Ok();
}

Status Trainer::StepResults(double* loss, double* grad_norm) {
  double loss_sum = 0.0;
  TRAINER_RETURN_IF_ERROR(pipeline_->LossSum(&loss_sum));
  TRAINER_RETURN_IF_ERROR(ShareLastStageValue(&loss_sum));
  *loss = loss_sum / (train_masked_ ? step_trained_ : TokensPerStep());
  if (NormOnDevice()) {
    double sum_squares = 0.0;
    TRAINER_RETURN_IF_ERROR(optimizer_->QueuedGradNormSquared(&sum_squares));
    host_grad_norm_ = std::sqrt(sum_squares);
  }
  *grad_norm = host_grad_norm_;
  return Status::Ok();
}

}  // namespace trainer
