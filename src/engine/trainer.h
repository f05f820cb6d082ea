// Trainer: the training loop of one rank. Setup (backend, model stage, optimizer, data, resume),
// then steps: this rank's DP slice of the global batch -> micro-batches through the pipeline
// schedule -> DP gradient reduction -> global-norm clip -> AdamW -> metrics, evaluation,
// checkpoints, and a coordinated stop on preemption signals. No MPI here: groups come in as
// Communicators.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_async.h"
#include "common/communicator.h"
#include "common/filesystem.h"
#include "common/parallel_groups.h"
#include "common/progress.h"
#include "config/train_config.h"
#include "data/data_sources.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "engine/gpu_routes.h"
#include "engine/metrics.h"
#include "engine/phase_timer.h"
#include "engine/pipeline.h"
#include "model/backend.h"
#include "optimizer/adamw.h"

namespace trainer {

struct TrainingState {
  int64_t step = 0;              // optimizer steps taken
  int64_t consumed_samples = 0;  // position in the global sample order
  int64_t tokens_seen = 0;
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, const ParallelGroups& groups, Backend* backend);
  ~Trainer();

  // Build the model and optimizer, open the data. Local to this rank: callers agree on the
  // result across ranks before going on.
  Status Setup();
  // Initialise parameters, or resume when Checkpoint.resume is set. Collective over the world.
  Status Restore();
  // After Restore, agreed: periodic asynchronous saves get their host copy of the state now
  // rather than at the first save, which it would hold up for seconds (a 1.3B model's 15.8 GB,
  // page-locked); where a host's ranks cannot hold it, saves are synchronous (one warning).
  // Collective over the world (every rank must reach it: not inside Setup or Restore, which
  // some ranks may leave early with an error).
  Status PrepareCheckpointSaves();
  // Train to Engine.max_steps. Returns ExitCode::kPreempted after saving on a signal, and
  // ExitCode::kDiverged (every rank, nothing saved from that state) on a non-finite loss or
  // gradient norm; both carry no message (rank 0 has logged it). A divergence first finishes a
  // background checkpoint write in flight (the last good state).
  Status Run();
  // Rank 0, no communication: waits for a background checkpoint write in flight, so that a run
  // that stops on an error commits it before the process ends. Other ranks: nothing.
  void WaitForCheckpointWrite() {
    if (saver_ != nullptr) saver_->WaitForWrite();
  }

  const TrainingState& state() const { return state_; }
  // Told of each phase of work as it starts, and of a checkpoint's lock wait, verification,
  // load and save tensor by tensor, so that a watchdog can tell a stuck collective from
  // progress (nullptr: nobody watches).
  void set_progress(Progress* progress) { progress_ = progress; }
  GptModel* model() { return model_.get(); }
  AdamW* optimizer() { return optimizer_.get(); }
  // Average validation loss over Engine.eval_iters batches of Global.global_batch_size sequences
  // (collective); the same samples whatever the layout.
  Status Evaluate(double* val_loss);

 private:
  // LoRA: the frozen base weights from `pretrained` (AgreeOnPretrained's file), or from
  // Global.seed where Checkpoint.init_from is empty.
  Status LoadLoraBase(const std::string& pretrained);
  // The file that Checkpoint.init_from names, as rank 0 resolves it, into *file; every rank's copy
  // agreed with rank 0's (PretrainedFingerprint). One line and exit 4 otherwise.
  Status AgreeOnPretrained(std::string* file);
  // `load` (every rank) of AgreeOnPretrained's file, agreed. Where that file was a checkpoint
  // directory's step and is gone since (the run writing there pruned it: its keep_last), the
  // directory's newest step is taken again, up to three times.
  Status WithPretrained(const std::function<Status(const std::string&)>& load);
  Status OpenData();
  // Queues one step. Where the gradient norm needs no communication (see NormOnDevice), nothing
  // in it waits for the GPU; StepResults reads the step's loss and norm later (collective).
  Status TrainStep(double* lr);
  Status StepResults(double* loss, double* grad_norm);
  // ExitCode::kDiverged when the step's loss or gradient norm is not finite. Both are sums over
  // ranks, so every rank comes to the same verdict at the same step (and finishes a checkpoint
  // write in flight together); rank 0 says what to do.
  Status StopIfDiverged(int step, double loss, double grad_norm);
  // The evaluation due at `step`: run, logged, written to the metrics; *val its loss.
  Status EvaluateAndLog(int step, double* val);
  // A resume at a step whose evaluation was due: where metrics.jsonl holds no val_loss for it
  // (the run was stopped during the evaluation, which follows the save), it runs first.
  Status EvaluateOwed(int step, double* val);
  // This rank's gradient sum of squares is the global one (no TP, PP or ZeRO-1 split), so the
  // clipping scale can be worked out on the device.
  bool NormOnDevice() const;
  double TokensPerStep() const;  // global batch x sequence length
  // The closing line of a run: the step reached, this run's steps, tokens and time, the last
  // losses (NaN: none) and where the last checkpoint is.
  std::string Summary(int64_t steps, double seconds, double loss, double val_loss) const;
  void SetUpOverlappedReduction();
  Status ReduceGradients();
  // Gradients of parameters that several model-parallel ranks hold, summed over them: LayerNorms
  // under sequence parallelism (TP group) and the tied token embedding (embedding group).
  // outside_blocks_only: the tensors outside the blocks (stages 2-3 reduce the blocks' during
  // the backward pass).
  Status ReduceSharedParameterGradients(bool outside_blocks_only = false);
  // Sharded (Distributed.sharding): the reduce-scatter over the sharding group (stage 1: all of
  // it; stages 2-3: the tensors outside the blocks), then the all-reduce over the replicas.
  Status ReduceShardedGradients();
  Status GlobalGradNorm(double* norm);
  // Whether the step's experts add their gradients' squares to the norm as they are written
  // (GptModel::AddExpertGradSquaresTo): the norm on the device, one micro-batch, no DP, no LoRA.
  bool FoldsExpertNorm() const;
  // A host batch: this rank's (GA*B, T) inputs and targets.
  struct HostBatch {
    std::vector<int32_t> inputs, targets;
    std::vector<int32_t> doc_starts;  // Data.packing: documents, every stage; else empty
    int64_t trained = 0;  // with a loss mask, on the last stage: the targets not ignored (>= 0)
  };
  // A data error on every rank that opened its data when the ranks' training sets differ
  // (sources: this rank's, null when it failed to open them).
  Status AgreeOnTrainingSet(const DataSources* sources);
  // Reads this rank's DP slice of `global_ids` (ids of `samples`) into *batch.
  // first_position: the consumed-samples index of global_ids[0] (training; it places the windows
  // under Data.shift_windows), -1 for validation.
  Status ReadBatch(const std::vector<int64_t>& global_ids, int64_t first_position,
                   const SampleSet& samples, HostBatch* batch);
  // The training batch after `consumed_samples`, read in the background while the step runs.
  // HDF5 serves one thread at a time: JoinPrefetch before any other HDF5 use.
  void StartPrefetch(int64_t consumed_samples);
  void JoinPrefetch();
  // Makes batches_[current_] the batch after `consumed_samples` (prefetched, or read now).
  Status TakeBatch(int64_t consumed_samples);
  Status ShareLastStageValue(double* value);  // last stage -> every stage, summed over DP
  // A checkpoint of the current state. Under Checkpoint.async_save it finishes a save in flight
  // first, then leaves rank 0 writing this one in the background, unless `wait` (the end of
  // training, a preemption or Engine.exit_duration_min), which waits for it too.
  Status SaveCheckpoint(bool wait);
  // Waits for the background save in flight (collective), then logs and records it.
  Status FinishCheckpoint();
  // The metrics' start for the step Restore reached (MetricsWriter::StartAt or StartBranch).
  Status StartMetrics();
  // Checkpoint.async_save: the saver, or (HDF5 not thread-safe) a warning and synchronous saves.
  void CreateCheckpointSaver();
  Status Resume();
  // Rank 0, after a resume: one warning listing the settings that differ from the saving run's
  // (ChangedSettings), which make the run depart from what an uninterrupted one computes.
  void WarnAboutChangedSettings(const CheckpointLoadResult& loaded) const;

  TrainConfig config_;
  ParallelGroups groups_;
  Backend* backend_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<PipelineStage> pipeline_;
  std::unique_ptr<PhaseTimer> timer_;
  // Overlapped DP reduction (GPU): one bucket of gradient tensors per local block, and the rest.
  void* compute_stream_ = nullptr;  // set when the reduction overlaps the backward pass
  std::vector<std::vector<Tensor>> buckets_;
  std::vector<Tensor> tail_bucket_;
  // Expert parallelism: the gradient buffer's spans summed over DP (dense parameters) and over
  // the expert-DP group (the experts this rank holds); sharded, the same cut of each piece.
  std::vector<Tensor> dense_grads_, expert_grads_;
  std::vector<std::pair<size_t, size_t>> expert_runs_;  // [begin, end) of the flat buffer
  Status SetUpExpertParallel();
  // Appends the dense and expert runs of `rows` (flat elements from `lo` on) to the two lists.
  void SplitByKind(size_t lo, const Tensor& rows, std::vector<Tensor>* dense,
                   std::vector<Tensor>* experts) const;
  DataSources data_;
  std::unique_ptr<GlobalSampler> sampler_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<GpuRouteReport> routes_;  // Engine.gpu_routes: the report after a step
  HostBatch batches_[2];                    // the batch in use and the one being prefetched
  int current_ = 0;
  std::future<Status> prefetch_;
  // Data with a /loss_mask: the loss is averaged over the targets it keeps in the global batch.
  bool train_masked_ = false, val_masked_ = false;
  double step_trained_ = 0.0;    // the last step's global count of trained targets (train_masked_)
  double host_grad_norm_ = 0.0;  // the last step's norm, where it was computed on the host
  size_t planned_arena_ = 0;     // what Setup reserved (trainer plan's arena)
  double planned_device_gib_ = 0;  // GPU: trainer plan's whole figure for this rank, in GiB
  bool memory_over_plan_reported_ = false;
  Status prefetch_status_;
  int64_t prefetched_position_ = -1;
  TrainingState state_;
  std::string lora_base_;  // LoRA: the base as checkpoints record it (LoraBaseIdentity)
  std::string last_checkpoint_;                // saved or resumed from in this run; empty if none
  std::unique_ptr<FileLock> checkpoint_lock_;  // rank 0: Checkpoint.dir's, for the whole run
  std::unique_ptr<FileLock> output_lock_;      // rank 0: Engine.output_dir's (metrics)
  Progress* progress_ = nullptr;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  // Last: destroyed first, so that rank 0's background write ends while the rest still exists.
  std::unique_ptr<AsyncCheckpointSaver> saver_;
  int64_t saving_step_ = 0;     // the step of the save in flight
  double save_blocking_s_ = 0;  // and the seconds its copy and gather held training up
};

}  // namespace trainer
