// Trainer (trainer.h): the step loop, evaluation and the divergence check.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/filesystem.h"
#include "common/log.h"
#include "engine/gpu_monitor.h"
#include "engine/moe_metrics.h"

#include "engine/signals.h"
#include "engine/trainer.h"

namespace trainer {
namespace {
double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// %g, but "nan" for any NaN (printf writes "-nan" for some).
std::string NumberText(double v) {
  return std::isnan(v) ? "nan" : StrFormat("%g", v);
}

// " | ETA 1h02m" (or 4m05s, 12s) for the steps left at the last window's pace; "" when none are.
std::string Eta(int steps_left, double seconds_per_step) {
  if (steps_left <= 0) return "";
  const long long s = std::llround(steps_left * seconds_per_step);
  if (s >= 3600) return StrFormat(" | ETA %lldh%02lldm", s / 3600, s % 3600 / 60);
  if (s >= 60) return StrFormat(" | ETA %lldm%02llds", s / 60, s % 60);
  return StrFormat(" | ETA %llds", s);
}
}  // namespace

Status Trainer::Evaluate(double* val_loss) {
  // Engine.eval_iters validation batches of Global.global_batch_size sequences, each split over
  // the DP ranks as a training batch is: the same samples, and so the same val_loss, on every
  // layout.
  const int B = config_.global.micro_batch_size, T = config_.model.sequence_length();
  const int GB = config_.global.global_batch_size;
  if (data_.val.num_samples() <= 0)
    return NoValidationDataError(config_.data, config_.engine.eval_freq);
  ReportProgress(progress_, "an evaluation");
  JoinPrefetch();                          // HDF5 serves one thread at a time
  HostBatch* batch = &batches_[current_];  // the finished step's batch; the prefetched one stays
  double total = 0.0, trained = 0.0;
  const int iters = config_.engine.eval_iters;
  for (int it = 0; it < iters; ++it) {
    ReportProgress(progress_, "an evaluation");  // each batch: Engine.eval_iters may be many
    TRAINER_RETURN_IF_ERROR(
        ReadBatch(ValidationBatch(it, GB, data_.val.num_samples()), -1, data_.val, batch));
    MicroBatches mb;
    mb.count = config_.gradient_accumulation_steps();
    mb.batch = B;
    mb.seq_len = T;
    mb.inputs = batch->inputs.data();
    mb.targets = batch->targets.data();
    if (!batch->doc_starts.empty()) mb.doc_starts = batch->doc_starts.data();
    double sum = 0.0;
    TRAINER_RETURN_IF_ERROR(pipeline_->EvalStep(mb, &sum));
    total += sum;
    trained += static_cast<double>(batch->trained);
  }
  TRAINER_RETURN_IF_ERROR(ShareLastStageValue(&total));
  if (!val_masked_) {
    *val_loss = total / (static_cast<double>(iters) * GB * T);
    return Status::Ok();
  }
  // With a /loss_mask: averaged over the targets of mask 1; none counted: no loss (NaN).
  TRAINER_RETURN_IF_ERROR(ShareLastStageValue(&trained));
  *val_loss = trained > 0 ? total / trained : std::nan("");
  return Status::Ok();
}

Status Trainer::EvaluateAndLog(int step, double* val) {
  const EngineConfig& e = config_.engine;
  TRAINER_RETURN_IF_ERROR(Evaluate(val));
  if (std::isnan(*val))  // metrics.jsonl: null
    LogWarning(StrFormat(
        "step %6d/%d | no val loss: the %lld validation samples evaluated have no target of "
        "loss mask 1 (/loss_mask). Raise Engine.eval_iters, or validate on conversations "
        "with assistant replies",
        step, e.max_steps,
        static_cast<long long>(e.eval_iters) * config_.global.global_batch_size));
  else
    LogInfo(StrFormat("step %6d/%d | val loss %.4f", step, e.max_steps, *val));
  return metrics_->Write({{"step", step}, {"val_loss", *val}});
}

Status Trainer::EvaluateOwed(int step, double* val) {
  const int freq = config_.engine.eval_freq;
  if (step == 0 || freq <= 0 || step % freq != 0) return Status::Ok();
  double owed = groups_.world_rank == 0 && !metrics_->HasValLoss(step) ? 1.0 : 0.0;
  TRAINER_RETURN_IF_ERROR(groups_.world_host->AllReduce(&owed, 1, DType::kF64, ReduceOp::kSum));
  if (owed == 0) return Status::Ok();
  LogInfo(StrFormat(
      "step %6d: the evaluation due at the checkpoint resumed is not in metrics.jsonl (the run "
      "stopped during it): evaluating first",
      step));
  return EvaluateAndLog(step, val);
}

Status Trainer::Run() {
  const EngineConfig& e = config_.engine;
  const double tokens_per_step = TokensPerStep();
  const auto start = std::chrono::steady_clock::now();
  auto window_start = start;
  int window_steps = 0;
  // Idle share of a 1F1B step: (P - 1) / (M + P - 1) for P stages and M micro-batches.
  const int P = groups_.topology.pp, M = config_.gradient_accumulation_steps();
  const double bubble = static_cast<double>(P - 1) / (M + P - 1);
  // Model FLOPs utilisation as PaLM counts it: 6 N + 12 L NH HD T per token (model_spec.h:
  // TrainingFlopsPerToken), against the dense bf16 peak of every GPU in the job
  // (Engine.peak_tflops each; ranks that share a GPU share its peak).
  const double flops_per_token =
      TrainingFlopsPerToken(model_->spec(), config_.model.sequence_length());
  const bool on_gpu = backend_->device_memory();
  const int gpus = groups_.gpus > 0 ? groups_.gpus : groups_.topology.world_size;
  const double peak = config_.engine.peak_tflops * 1e12 * gpus;
  const int64_t first_step = state_.step;
  if (first_step >= e.max_steps) {
    LogInfo(
        StrFormat("nothing to do: step %lld >= Engine.max_steps=%d (resumed from %s). Raise "
                  "Engine.max_steps to train on",
                  static_cast<long long>(first_step), e.max_steps, last_checkpoint_.c_str()));
    return Status::Ok();
  }
  const OptimizerConfig& o = config_.optimizer;
  if (groups_.world_rank == 0 && o.warmup_steps > e.max_steps)
    LogWarning(StrFormat(
        "Engine.max_steps=%d ends within Optimizer.warmup_steps=%d: the learning rate stops at "
        "%.3g, never reaching Optimizer.lr=%g. Lower warmup_steps, or train longer",
        e.max_steps, o.warmup_steps, o.lr * e.max_steps / o.warmup_steps, o.lr));
  double last_loss = std::nan(""), last_val = std::nan("");  // for the closing summary
  TRAINER_RETURN_IF_ERROR(EvaluateOwed(static_cast<int>(first_step), &last_val));
  GpuMonitor gpu_monitor(backend_);
  while (state_.step < e.max_steps) {
    // Engine.profile times the phases of every step after three warm-up steps.
    if (e.profile && state_.step == first_step + 3) {
      timer_ = std::make_unique<PhaseTimer>(backend_, true);
      TRAINER_RETURN_IF_ERROR(backend_->ProfilerRange(true));
    }
    double lr = 0;
    ReportProgress(progress_, "a training step");
    TRAINER_RETURN_IF_ERROR(TrainStep(&lr));
    ++window_steps;
    if (!routes_->done()) {  // the GPU routes, once settled (normally after the first step)
      std::string routes_json;
      TRAINER_RETURN_IF_ERROR(routes_->AfterStep(state_.step >= e.max_steps, &routes_json));
      if (!routes_json.empty()) metrics_->AddToNextRecord("gpu_routes", routes_json);
    }
    const int step = static_cast<int>(state_.step);
    const bool log_due = step % e.logging_freq == 0 || step == e.max_steps || step == 1;
    double loss = 0, norm = 0;
    if (log_due) {
      TRAINER_RETURN_IF_ERROR(StepResults(&loss, &norm));  // waits for the GPU
      TRAINER_RETURN_IF_ERROR(backend_->Synchronize());
      const double window = Seconds(window_start);
      const double tokens_per_s = tokens_per_step * window_steps / window;
      const double elapsed = Seconds(start);
      const double mfu = on_gpu ? tokens_per_s * flops_per_token / peak : 0.0;
      const double memory_gib = DeviceMemoryUsed(backend_) / (1024.0 * 1024.0 * 1024.0);
      const std::string mfu_text = on_gpu ? StrFormat("MFU %.1f%% | ", 100 * mfu) : "";
      GpuReport gpu;
      TRAINER_RETURN_IF_ERROR(gpu_monitor.Report(groups_.world_host, &gpu));
      LogInfo(StrFormat(
          "step %6d/%d | loss %.4f | lr %.3e | grad norm %.3f | %.0f tokens/s | "
          "%.1f ms/step | %s%.2f GiB%s | elapsed %.1fs%s",
          step, e.max_steps, loss, lr, norm, tokens_per_s, 1e3 * window / window_steps,
          mfu_text.c_str(), memory_gib, gpu.Text(groups_.topology.world_size).c_str(), elapsed,
          // The run's first window (from step 1 or a resumed step) holds the start-up (GEMM
          // tuning, warm-up): no ETA from it.
          step - window_steps == first_step
              ? ""
              : Eta(e.max_steps - step, window / window_steps).c_str()));
      std::vector<std::pair<std::string, double>> record = {
          {"step", step},
          {"loss", loss},
          {"lr", lr},
          {"grad_norm", norm},
          {"tokens_per_s", tokens_per_s},
          {"step_ms", 1e3 * window / window_steps},
          {"elapsed_s", elapsed},
          {"consumed_samples", state_.consumed_samples},
          {"pipeline_bubble", bubble},
          {"mfu", mfu},
          {"memory_gib", memory_gib}};
      if (planned_device_gib_ > 0) {  // beside the plan's figure, and said once where it is over
        record.emplace_back("memory_planned_gib", planned_device_gib_);
        if (!memory_over_plan_reported_ && memory_gib > planned_device_gib_ + 0.25) {
          memory_over_plan_reported_ = true;
          LogInfo(StrFormat("memory: %.2f GiB in use on this GPU, %.2f GiB more than trainer "
                            "plan's %.2f GiB (held outside what the plan counts)",
                            memory_gib, memory_gib - planned_device_gib_, planned_device_gib_));
        }
      }
      for (auto& field : gpu.Fields(tokens_per_s)) record.push_back(std::move(field));
      if (config_.model.moe())
        TRAINER_RETURN_IF_ERROR(AppendMoeMetrics(
            *model_, groups_,
            config_.global.global_batch_size / config_.global.micro_batch_size, &record));
      TRAINER_RETURN_IF_ERROR(metrics_->Write(record));
      window_start = std::chrono::steady_clock::now();
      window_steps = 0;
      TRAINER_RETURN_IF_ERROR(StopIfDiverged(step, loss, norm));
      last_loss = loss;
    }
    const bool save_due = e.save_steps > 0 && (step % e.save_steps == 0 || step == e.max_steps);
    // Agree at the step boundary on a preemption signal (any rank's signal stops all), on rank
    // 0's clock against Engine.exit_duration_min, and on whether rank 0's background checkpoint
    // write has ended.
    const bool root = groups_.world_rank == 0;
    double flags[3] = {
        PreemptionRequested() ? 1.0 : 0.0,
        root && e.exit_duration_min > 0 && Seconds(started_) >= 60 * e.exit_duration_min ? 1.0
                                                                                         : 0.0,
        root && saver_ != nullptr && saver_->WriteDone() ? 1.0 : 0.0};
    TRAINER_RETURN_IF_ERROR(groups_.world_host->AllReduce(flags, 3, DType::kF64, ReduceOp::kSum));
    const bool signalled = flags[0] > 0, out_of_time = flags[1] > 0,
               stop = signalled || out_of_time;
    if (flags[2] > 0) TRAINER_RETURN_IF_ERROR(FinishCheckpoint());  // log it, report a failure
    // The time training waits for a save or an evaluation is left out of the logging window, so
    // that tokens/s, ms/step and MFU measure training steps (saves report checkpoint_save_s).
    // The steps' GPU work still queued belongs to the window: waited for before the pause.
    const bool eval_due = e.eval_freq > 0 && (step % e.eval_freq == 0 || step == e.max_steps);
    if ((save_due || stop || eval_due) && !log_due)
      TRAINER_RETURN_IF_ERROR(backend_->Synchronize());
    const auto pause_start = std::chrono::steady_clock::now();
    if (save_due || stop) {
      // Nothing non-finite is saved: a step that was not logged is checked first.
      if (!log_due) {
        TRAINER_RETURN_IF_ERROR(StepResults(&loss, &norm));
        TRAINER_RETURN_IF_ERROR(StopIfDiverged(step, loss, norm));
      }
      ReportProgress(progress_, "a checkpoint save");
      // A stop, and the end of training, wait for the write: the process ends after it.
      TRAINER_RETURN_IF_ERROR(SaveCheckpoint(stop || step == e.max_steps));
    }
    // After the save: an evaluation that fails never costs the checkpoint that was due (and one
    // cut short is run again by the resumed run: EvaluateOwed).
    if (eval_due) TRAINER_RETURN_IF_ERROR(EvaluateAndLog(step, &last_val));
    // A stop runs the evaluation due at its step first: the resumed run starts after it.
    if (stop && step < e.max_steps) {
      const std::string by = PreemptionSignalName();
      const std::string why =
          signalled ? "stopped by " + (by.empty() ? std::string("a preemption signal") : by)
                    : StrFormat("stopped at Engine.exit_duration_min=%g (%.2f minutes used)",
                                e.exit_duration_min, Seconds(started_) / 60);
      LogInfo(
          StrFormat("%s after step %d; checkpoint saved. Resume with --resume auto (exit code 75)",
                    why.c_str(), step));
      return Status(ExitCode::kPreempted, "");
    }
    if (save_due || eval_due) window_start += std::chrono::steady_clock::now() - pause_start;
  }
  TRAINER_RETURN_IF_ERROR(FinishCheckpoint());  // the end of training waits for the writer
  LogInfo(Summary(state_.step - first_step, Seconds(start), last_loss, last_val));
  if (backend_->PeakAllocatedBytes() > 0)  // the host allocator's count (CPU ranks)
    LogInfo(
        StrFormat("memory: allocator high-water mark %zu bytes per rank (trainer plan's "
                  "arena: %zu bytes)",
                  backend_->PeakAllocatedBytes(), planned_arena_));
  if (optimizer_->OffloadPeakBytes() > 0 && !backend_->device_memory())
    LogInfo(StrFormat("memory: offloaded optimizer host high-water mark %zu bytes per rank",
                      optimizer_->OffloadPeakBytes()));
  if (timer_->enabled()) {
    TRAINER_RETURN_IF_ERROR(backend_->ProfilerRange(false));
    LogInfo(timer_->Report());
    std::vector<std::pair<std::string, double>> record = timer_->Record();
    record.insert(record.begin(), {"step", static_cast<double>(state_.step)});
    TRAINER_RETURN_IF_ERROR(metrics_->Write(record));
  }
  return Status::Ok();
}

std::string Trainer::Summary(int64_t steps, double seconds, double loss, double val_loss) const {
  const long long tokens = std::llround(steps * TokensPerStep());
  std::string text = StrFormat(
      "training done: step %lld/%d, %lld steps and %lld tokens in %.1fs this run (%lld "
      "tokens in all)",
      static_cast<long long>(state_.step), config_.engine.max_steps, static_cast<long long>(steps),
      tokens, seconds, static_cast<long long>(state_.tokens_seen));
  if (!std::isnan(loss)) text += StrFormat(" | loss %.4f", loss);
  if (!std::isnan(val_loss)) text += StrFormat(" | val loss %.4f", val_loss);
  if (last_checkpoint_.empty())
    text += " | no checkpoint (Engine.save_steps=0)";
  else
    text += " | last checkpoint " + last_checkpoint_;
  return text;
}

Status Trainer::StopIfDiverged(int step, double loss, double grad_norm) {
  if (std::isfinite(loss) && std::isfinite(grad_norm)) return Status::Ok();
  TRAINER_RETURN_IF_ERROR(FinishCheckpoint());  // the last good state, written in the background
  if (groups_.world_rank == 0) {
    const std::string saved = last_checkpoint_.empty()
                                  ? "no checkpoint was saved or resumed from in this run"
                                  : "the last checkpoint is " + last_checkpoint_;
    LogError(StrFormat(
        "training diverged (step %d; the loss and gradient norm are read every "
        "Engine.logging_freq=%d steps and before each save): loss %s, gradient norm %s. Nothing "
        "was saved from this state; %s. Lower Optimizer.lr or lengthen Optimizer.warmup_steps, "
        "then resume from it with --resume auto",
        step, config_.engine.logging_freq, NumberText(loss).c_str(), NumberText(grad_norm).c_str(),
        saved.c_str()));
  }
  return Status(ExitCode::kDiverged, "");
}

}  // namespace trainer
