// Trainer (trainer.h): checkpoints. Saves, synchronous or written in the background, with the
// host copy the latter needs reserved at start; the resume, and the initial weights of a fresh
// run (pretrained, the seed's, or a LoRA run's frozen base).
#include <chrono>

#include "checkpoint/checkpoint.h"
#include "checkpoint/pretrained.h"
#include "common/agree.h"
#include "common/filesystem.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "config/config_diff.h"
#include "config/config_loader.h"
#include "engine/trainer.h"

namespace trainer {

Status Trainer::PrepareCheckpointSaves() {
  if (saver_ == nullptr || config_.engine.save_steps <= 0) return Status::Ok();
  // Where a host's ranks cannot hold the copy beside what they hold already (an offloaded
  // optimizer's state is as large), saves are synchronous: every rank agrees, a save being
  // collective. They then read an offloaded state where it lies, without a copy.
  const double bytes = 3.0 * sizeof(float) * static_cast<double>(optimizer_->DownloadElements());
  const HostMemoryFacts host = QueryHostMemory();
  double fits = HostCopyFits(bytes, groups_.ranks_on_host, host) ? 1.0 : 0.0;
  TRAINER_RETURN_IF_ERROR(groups_.world_host->AllReduce(&fits, 1, DType::kF64, ReduceOp::kSum));
  if (fits == groups_.topology.world_size) {
    saver_->Reserve(model_.get(), *optimizer_);
    return Status::Ok();
  }
  saver_.reset();
  config_.checkpoint.async_save = false;
  if (groups_.world_rank == 0)
    LogWarning(StrFormat(
        "Checkpoint.async_save: the state's host copy (%.1f GiB per rank, 12 bytes per parameter "
        "it holds) does not fit beside what the ranks hold already (here %.1f GiB available for "
        "%d rank(s), %s), so checkpoints are saved synchronously: training waits for each write",
        bytes / 1073741824.0, host.available_bytes / 1073741824.0, groups_.ranks_on_host,
        host.source.c_str()));
  return Status::Ok();
}

Status Trainer::Restore() {
  if (config_.model.lora())
    TRAINER_RETURN_IF_ERROR(
        WithPretrained([this](const std::string& file) { return LoadLoraBase(file); }));
  if (!config_.checkpoint.resume.empty()) TRAINER_RETURN_IF_ERROR(Resume());
  // Rank 0's work alone (its metrics writer), agreed before the collectives below.
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(groups_.world_host, StartMetrics()));
  if (state_.step > 0) return Status::Ok();  // resumed: the checkpoint's weights
  // A fresh run from pretrained weights (with LoRA they are the frozen base, loaded above).
  if (!config_.checkpoint.init_from.empty() && !config_.model.lora()) {
    std::vector<float> flat;
    std::string what;
    TRAINER_RETURN_IF_ERROR(WithPretrained([&](const std::string& file) {
      return PretrainedParameterValues(file, config_.model, model_->partition(),
                                       model_->parameters(), &flat, &what, progress_);
    }));
    LogInfo("initial weights from " + what + "; step 0, fresh optimizer state");
    return optimizer_->SetMaster(flat);
  }
  return optimizer_->SetMaster(InitialParameterValues(config_.model, model_->partition(),
                                                      model_->parameters(), config_.global.seed));
}

Status Trainer::WithPretrained(const std::function<Status(const std::string&)>& load) {
  for (int attempt = 1;; ++attempt) {
    std::string file;
    Status loaded = AgreeOnPretrained(&file);  // agreed: every rank loads, or none
    if (loaded.ok()) loaded = load(file);
    // Chosen from a checkpoint directory, and gone since: the run writing there pruned it.
    double gone = !loaded.ok() && !file.empty() &&
                  CheckpointFile(config_.checkpoint.init_from) != file && !PathExists(file);
    TRAINER_RETURN_IF_ERROR(groups_.world_host->AllReduce(&gone, 1, DType::kF64, ReduceOp::kMax));
    if (gone > 0 && attempt < 3) {
      if (groups_.world_rank == 0)
        LogWarning(
            StrFormat("%s (Checkpoint.init_from) was removed while this run read it (the "
                      "run writing there keeps only its newest steps): taking its newest "
                      "step again",
                      file.c_str()));
      continue;
    }
    return AgreeOnStatus(groups_.world_host, loaded);
  }
}

// Rank 0 resolves Checkpoint.init_from (a checkpoint directory's newest step may move on while
// the ranks start) and every rank reads that file, whose copy must be rank 0's: a node-local copy
// of other weights, or of another step, would start the replicas apart without a word.
Status Trainer::AgreeOnPretrained(std::string* file) {
  const std::string& path = config_.checkpoint.init_from;
  std::string chosen = groups_.world_rank == 0 ? ResolvePretrained(path) : std::string();
  TRAINER_RETURN_IF_ERROR(BroadcastText(groups_.world_host, &chosen));
  *file = chosen.empty() ? path : chosen;  // names no weights: the load says so
  if (chosen.empty()) return Status::Ok();
  std::string mine;
  const Status here =
      PathExists(chosen)
          ? PretrainedFingerprint(chosen, &mine)
          : CheckpointError(StrFormat(
                "rank 0 starts from %s (Checkpoint.init_from=%s), which rank %d cannot see. Put "
                "it on a file system that every node mounts at the same path",
                chosen.c_str(), path.c_str(), groups_.world_rank));
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(groups_.world_host, here));
  std::string root = mine;
  TRAINER_RETURN_IF_ERROR(BroadcastText(groups_.world_host, &root));
  const Status same =
      root == mine ? Status::Ok()
                   : CheckpointError(StrFormat(
                         "rank %d's %s (Checkpoint.init_from) is not rank 0's (%s here, %s on "
                         "rank 0): every rank must start from the same weights. Put them on a "
                         "file system that every node mounts at the same path, or make each "
                         "node's copy the same",
                         groups_.world_rank, chosen.c_str(), mine.c_str(), root.c_str()));
  return AgreeOnStatus(groups_.world_host, same);
}

// What the interrupted run logged past the checkpoint resumed (or, for a fresh start, what an
// earlier run that committed nothing logged) is logged again from here. Gone back below the
// folder's newest checkpoint, the records of the line left stay until this run commits one (and
// where it never does, they stay). A run with nothing to train changes nothing.
Status Trainer::StartMetrics() {
  if (state_.step >= config_.engine.max_steps && state_.step > 0) return Status::Ok();
  const std::vector<std::string> committed = groups_.world_rank == 0 && state_.step > 0
                                                 ? CommittedCheckpoints(config_.checkpoint_dir())
                                                 : std::vector<std::string>{};
  const bool gone_back =
      !committed.empty() && CheckpointFolderStep(committed.front()) > state_.step;
  if (gone_back) return metrics_->StartBranch(state_.step);
  return metrics_->StartAt(state_.step,
                           state_.step > 0 ? CheckpointFile(last_checkpoint_) : std::string());
}

Status Trainer::LoadLoraBase(const std::string& pretrained) {
  std::string what;
  TrainConfig resolved = config_;  // the file every rank reads (AgreeOnPretrained)
  if (!config_.checkpoint.init_from.empty()) resolved.checkpoint.init_from = pretrained;
  // Recorded as the setting names it, with the file loaded (a checkpoint folder's newest step
  // may move on during the run) and its fingerprint.
  TRAINER_RETURN_IF_ERROR(LoraBaseIdentity(resolved, &lora_base_));
  lora_base_ = LoraBaseName(config_) + lora_base_.substr(LoraBaseName(resolved).size());
  TRAINER_RETURN_IF_ERROR(LoadLoraBaseWeights(resolved, model_.get(), &what, progress_));
  LogInfo(
      StrFormat("LoRA rank %d, alpha %g on %s: %zu adapter tensors train; the base weights "
                "are frozen, from %s",
                config_.model.lora_rank, config_.model.lora_alpha,
                config_.model.lora_targets.c_str(), model_->parameters().size(), what.c_str()));
  return Status::Ok();
}

Status Trainer::SaveCheckpoint(bool wait) {
  const auto start = std::chrono::steady_clock::now();
  JoinPrefetch();  // HDF5 serves one thread at a time
  CheckpointWriteRequest request;
  request.directory = config_.checkpoint_dir();
  request.step = state_.step;
  request.consumed_samples = state_.consumed_samples;
  request.tokens_seen = state_.tokens_seen;
  request.seed = config_.global.seed;
  request.config_text = FormatConfig(config_);
  request.keep_last = config_.checkpoint.keep_last;
  request.keep_every = config_.checkpoint.keep_every;
  request.progress = progress_;
  if (!data_.train_files.empty()) {  // every file was packed alike (OpenDataSources checks)
    request.eod_id = data_.train_files.front()->eod_id();
    request.tokenizer = data_.train_files.front()->tokenizer();
  }
  request.gpu_routes = routes_->json();  // rank 0's, once reported; empty before (and on CPUs)
  request.lora_base = lora_base_;
  request.lock = checkpoint_lock_.get();
  request.stage_layers = StageLayerCounts(config_.model.num_layers, config_.distributed.pp_degree,
                                          config_.distributed.pp_layers);
  CreateCheckpointSaver();
  if (config_.checkpoint.async_save) {
    TRAINER_RETURN_IF_ERROR(FinishCheckpoint());  // one save at a time
    TRAINER_RETURN_IF_ERROR(saver_->Start(request, model_.get(), optimizer_.get()));
    saving_step_ = state_.step;
    save_blocking_s_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return wait ? FinishCheckpoint() : Status::Ok();
  }
  CheckpointSaveReport report;
  TRAINER_RETURN_IF_ERROR(
      SaveCheckpointCollective(request, model_.get(), optimizer_.get(), groups_, &report));
  last_checkpoint_ = report.path;
  LogInfo(StrFormat("saved checkpoint %s (%.1f MB in %.2fs)", report.path.c_str(),
                    report.bytes / 1e6, report.seconds));
  TRAINER_RETURN_IF_ERROR(metrics_->SettleBranch());
  return metrics_->Write({{"step", static_cast<double>(state_.step)},
                          {"checkpoint_bytes", static_cast<double>(report.bytes)},
                          {"checkpoint_save_s", report.seconds}});
}

void Trainer::CreateCheckpointSaver() {
  if (!config_.checkpoint.async_save || saver_ != nullptr) return;
  if (AsyncCheckpointSavesSupported()) {
    saver_ = std::make_unique<AsyncCheckpointSaver>(groups_);
    return;
  }
  config_.checkpoint.async_save = false;
  if (groups_.world_rank == 0)
    LogWarning(
        "Checkpoint.async_save: this build's HDF5 is not thread-safe, so checkpoints are "
        "saved synchronously (every rank waits for the write)");
}

Status Trainer::FinishCheckpoint() {
  if (saver_ == nullptr || !saver_->pending()) return Status::Ok();
  ReportProgress(progress_, "a checkpoint write");
  CheckpointSaveReport report;
  TRAINER_RETURN_IF_ERROR(saver_->Finish(&report));
  last_checkpoint_ = report.path;
  LogInfo(StrFormat(
      "saved checkpoint %s (%.1f MB; training waited %.2fs, written in the background in %.2fs)",
      report.path.c_str(), report.bytes / 1e6, save_blocking_s_, report.seconds));
  TRAINER_RETURN_IF_ERROR(metrics_->SettleBranch());
  return metrics_->Write({{"step", static_cast<double>(saving_step_)},
                          {"checkpoint_bytes", static_cast<double>(report.bytes)},
                          {"checkpoint_save_s", save_blocking_s_},
                          {"checkpoint_write_s", report.seconds}});
}

Status Trainer::Resume() {
  CheckpointLoadResult loaded;
  TRAINER_RETURN_IF_ERROR(LoadCheckpointCollective(config_.checkpoint_dir(),
                                                   config_.checkpoint.resume, config_, model_.get(),
                                                   optimizer_.get(), groups_, &loaded, progress_));
  if (loaded.path.empty()) return Status::Ok();  // nothing to resume from
  last_checkpoint_ = loaded.path;
  state_.step = loaded.step;
  state_.consumed_samples = loaded.consumed_samples;
  state_.tokens_seen = loaded.tokens_seen;
  LogInfo(StrFormat("resumed from %s at step %lld (%lld samples consumed)", loaded.path.c_str(),
                    static_cast<long long>(state_.step),
                    static_cast<long long>(state_.consumed_samples)));
  if (groups_.world_rank == 0) WarnAboutChangedSettings(loaded);
  return Status::Ok();
}

void Trainer::WarnAboutChangedSettings(const CheckpointLoadResult& loaded) const {
  const std::string& checkpoint = loaded.path;
  auto before = LoadConfigText(loaded.config_text, checkpoint, {});
  if (!before.ok()) {
    LogWarning(StrFormat("cannot compare this run's settings with those %s was saved with: %s",
                         checkpoint.c_str(), before.status().message().c_str()));
    return;
  }
  const std::vector<std::string> changes = ChangedSettings(before.value(), config_);
  if (changes.empty()) return;
  std::string list;
  for (const std::string& c : changes) list += (list.empty() ? "" : ", ") + c;
  LogWarning(
      StrFormat("resumed with %zu setting%s other than those %s was saved with: %s. From "
                "here on the run follows them, not what the saving run would have done",
                changes.size(), changes.size() == 1 ? "" : "s", checkpoint.c_str(), list.c_str()));
}

}  // namespace trainer
