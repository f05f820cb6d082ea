// `trainer plan --config FILE [-o ...] --world-size N`: validate a config for a world size and
// print each pipeline stage's memory per rank, without starting MPI or touching a GPU: the arena
// that `trainer train` reserves (weights, gradients, master weights and Adam moments,
// activations of the 1F1B slots, logits, backward scratch), as the model's own allocation code
// counts it, and on GPUs what the device needs beside it.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "engine/memory_plan.h"
#include "model/gpt.h"
#include "model/model_spec.h"
#include "optimizer/adamw.h"

namespace trainer {
namespace {

double GiB(double bytes) {
  return bytes / (1024.0 * 1024.0 * 1024.0);
}

// Bytes per parameter of weights, gradients and optimizer state by ZeRO stage over N ranks: the
// ZeRO paper's 2 + 2 + 12 with f32 gradients (4 bytes, not 2) and, on CPU ranks, f32 weights.
// Under LoRA these are the adapters' bytes, and each frozen weight holds its compute copy alone.
// halves: unsharded (stage 0, or N = 1), the master weights are the bf16 weights and 2-byte
// remainders (Optimizer.store_param_remainders). offload: the 12 bytes of master weights and
// moments live in host memory (sharding_offload), outside the arena.
std::string StageFormula(int stage, bool bf16, bool lora, bool halves, bool offload) {
  const int w = bf16 ? 2 : 4;  // the compute copy of the weights
  std::string trained;
  if (offload)
    trained = stage <= 1   ? StrFormat("%d", w + 4)
              : stage == 2 ? StrFormat("%d + 4/N", w)
                           : StrFormat("%d/N", w + 4);
  else
    switch (halves ? 0 : stage) {
      case 0:
        trained = StrFormat("%d", w + (halves ? 14 : 16));
        break;
      case 1:
        trained = StrFormat("%d + 12/N", w + 4);
        break;
      case 2:
        trained = StrFormat("%d + 16/N", w);
        break;
      default:
        trained = StrFormat("%d/N", w + 16);
    }
  if (!lora) return trained + " B/param";
  return StrFormat("%s B/adapter param + %d B/frozen weight", trained.c_str(), w);
}

// The memory of a rank of stage 0 at each sharding stage (Distributed.sharding), over the
// configured sharding degree, or over every data rank when the config shards nothing. LoRA runs
// with stages 0 and 1 only (validation refuses 2 and 3: the frozen base is not sharded).
void PrintShardingStages(const TrainConfig& config, bool gpu) {
  TrainConfig c = config;
  ShardingConfig& s = c.distributed.sharding;
  if (s.sharding_degree == 1) {
    s.sharding_degree = c.distributed.dp_degree;
    c.distributed.dp_degree = 1;
  }
  const DType dtype = PlannedComputeDtype(c, gpu);
  const bool lora = c.model.lora();
  const std::string weights =
      dtype == DType::kBF16 ? "with bf16 weights, f32 gradients" : "with f32 weights (CPU)";
  std::cout << StrFormat(
      "  sharding stages over N=%d ranks (weights+grads+optimizer per rank; bytes per parameter "
      "%s; %s):\n",
      s.sharding_degree, weights.c_str(),
      lora ? "LoRA: the adapters train and shard, the frozen weights stay whole; stages 2-3 do "
             "not run with LoRA"
           : "stages 2-3 add two gradient buckets of a block, stage 3 two gathered blocks; the "
             "tensors outside the blocks stay whole");
  for (int stage = 0; stage <= (lora ? 1 : 3); ++stage) {
    TrainConfig at = c;
    at.distributed.sharding.sharding_stage = std::max(stage, 1);
    if (stage == 0) {  // every data rank a replica: the shard ranks back among the DP ranks
      at.distributed.dp_degree *= at.distributed.sharding.sharding_degree;
      at.distributed.sharding.sharding_degree = 1;
    }
    const RankMemory m = PlanRankMemory(at, 0, dtype, gpu);
    std::cout << StrFormat(
        "    sharding stage %d: %s | weights+grads+optimizer %s | arena %s (%zu bytes)\n", stage,
        StageFormula(
            stage, dtype == DType::kBF16, lora,
            AdamW::KeepsMasterHalves(c.optimizer, dtype, stage == 0 ? 1 : s.sharding_degree,
                                     s.sharding_offload),
            s.sharding_offload)
            .c_str(),
        FormatBytes(m.state()).c_str(), FormatBytes(m.arena()).c_str(), m.arena());
  }
}

}  // namespace

int RunPlanCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer plan options");
  std::string config_path;
  std::vector<std::string> overrides;
  int world = 1;
  double device_gib = 0;
  options.add_options()("config,c", po::value(&config_path)->default_value(""), "YAML config")(
      "override,o", po::value(&overrides)->composing(), "Section.key=value, repeatable")(
      "world-size,n", po::value(&world)->default_value(1), "number of ranks")(
      "device-memory", po::value(&device_gib)->default_value(0),
      "GiB each rank has (a GPU's memory, as cudaMemGetInfo or nvidia-smi shows it; host memory "
      "per rank on the CPU): check that every stage fits, else name the largest micro-batch that "
      "does; 0: no check");
  po::variables_map vm;
  bool help = false;
  Status s = ParseCommandLine("plan", args, options, &vm, &help);
  if (s.ok() && help) {
    PrintCommandHelp("plan",
                     "--config FILE [-o Section.key=value ...] --world-size N "
                     "[--device-memory GIB]",
                     options);
    return 0;
  }
  if (s.ok() && world < 1)
    s = UsageError(StrFormat(
        "--world-size %d (trainer plan, command line): a layout has at least one rank. Give "
        "--world-size N, the number of ranks the job will start (N >= 1)",
        world));
  if (s.ok() && !(device_gib >= 0 && std::isfinite(device_gib)))  // NaN fails every comparison
    s =
        UsageError(StrFormat("--device-memory %g (trainer plan, command line): give a GPU's (or "
                             "a rank's host) memory in GiB, e.g. 80, or leave it out",
                             device_gib));
  TrainConfig c;
  if (s.ok()) {
    auto loaded = LoadConfig(config_path, overrides);
    s = loaded.ok() ? ValidateConfig(&loaded.value(), world) : loaded.status();
    if (s.ok()) c = loaded.value();
  }
  if (!s.ok()) {
    LogError(s.message());
    return s.exit_code();
  }
  const bool gpu = c.global.device != "cpu";
  const DistributedConfig& d = c.distributed;
  const int micro = c.gradient_accumulation_steps(), B = c.global.micro_batch_size;
  std::cout << StrFormat(
      "plan: %d ranks = dp %d x %stp %d x pp %d; %d micro-batches of %d x %d "
      "tokens per rank per step; %s%s\n",
      world, d.dp_degree,
      d.sharding.sharding_degree > 1
          ? StrFormat("sharding %d x ", d.sharding.sharding_degree).c_str()
          : "",
      d.tp_degree, d.pp_degree, micro, B, c.model.sequence_length(),
      !gpu                                          ? "fp32 (CPU)"
      : PlannedComputeDtype(c, gpu) == DType::kBF16 ? "bf16 compute, fp32 master/moments/grads"
                                                    : "fp32 compute (GPU)",
      d.zero_stage() > 0 ? StrFormat("; sharding stage %d over %d ranks x %d replicas",
                                     d.zero_stage(), d.sharding.sharding_degree, d.dp_degree)
                               .c_str()
                         : "");
  PrintShardingStages(c, gpu);
  if (c.model.moe())
    std::cout << "  mixture of experts: " << MoeShapeText(MakeModelSpec(c.model)) << "\n";
  for (int stage = 0; stage < d.pp_degree; ++stage) {
    const RankMemory m = PlanRankMemory(c, stage, PlannedComputeDtype(c, gpu), gpu);
    std::string beside;
    if (gpu)
      beside = StrFormat(
          " | on the GPU ~%.2f GiB in all (+%.2f GiB CUDA context and libraries, +%.2f GiB "
          "cuDNN attention workspace%s)",
          GiB(m.total()), GiB(m.device_base), GiB(m.attention_workspace),
          m.nccl_groups > 0
              ? StrFormat(", +%.2f GiB for %d NCCL communicator%s, their peers' buffers not "
                          "counted",
                          GiB(m.nccl), m.nccl_groups, m.nccl_groups == 1 ? "" : "s")
                    .c_str()
              : "");
    // The last stage's LM head holds one chunk of the micro-batch's logits (gpt_head.cpp).
    std::string chunks;
    if (stage == d.pp_degree - 1) {
      ModelPartition head;
      head.tp_size = d.tp_degree;
      const int64_t rows = static_cast<int64_t>(B) * c.model.sequence_length();
      const int64_t chunk =
          GptModel::LossChunkRows(c.model, head, PlannedComputeDtype(c, gpu), rows);
      chunks = StrFormat(" (%lld of %lld tokens at a time)", static_cast<long long>(chunk),
                         static_cast<long long>(rows));
    }
    // LoRA: the frozen base holds compute-dtype weights only (no gradients, no optimizer state).
    const std::string frozen =
        m.frozen > 0 ? StrFormat(" trained (LoRA) + %.1fM frozen (weights only)", m.frozen / 1e6)
                     : "";
    std::cout << StrFormat(
        "  stage %d: %d blocks, %.1fM parameters%s per rank | weights+grads+"
        "optimizer %.2f GiB | activations (%d slots) %.2f GiB | logits %.2f "
        "GiB%s | backward scratch %.2f GiB | arena %.2f GiB%s\n",
        stage, m.layers, m.parameters / 1e6, frozen.c_str(), GiB(m.state()), m.slots,
        GiB(m.model.activations), GiB(m.model.logits), chunks.c_str(), GiB(m.model.scratch),
        GiB(m.arena()), beside.c_str());
    if (m.offloaded > 0)
      std::cout << StrFormat(
          "  stage %d: sharding_offload keeps %.2f GiB of optimizer state and its staging "
          "ring in host memory per rank (outside the arena; %zu bytes)\n",
          stage, GiB(m.offloaded), m.offloaded);
    // Checkpoint.async_save: a copy of this rank's state in host memory (under sharding the
    // pieces are gathered: the whole of this rank's parameters), reserved when training starts
    // (Trainer::PrepareCheckpointSaves).
    if (c.checkpoint.async_save && c.engine.save_steps > 0)
      std::cout << StrFormat(
          "  stage %d: asynchronous checkpoint saves keep ~%.2f GiB of host memory per rank "
          "(a copy of the state, 12 bytes per parameter trained%s; without room: synchronous "
          "saves)\n",
          stage, GiB(12.0 * static_cast<double>(m.parameters)), gpu ? ", page-locked" : "");
    if (device_gib <= 0) continue;
    RankMemoryAvailable memory;
    memory.where = gpu ? StrFormat("a GPU of %g GiB", device_gib)
                       : StrFormat("%g GiB of host memory per rank", device_gib);
    memory.capacity = memory.free_now = device_gib * 1024 * 1024 * 1024;
    memory.source = "--device-memory";
    // On CPU ranks --device-memory is host memory, which an offloaded optimizer shares too.
    Status fits = gpu ? Status::Ok() : CheckOffloadFitsHost(c, stage, false, memory);
    if (fits.ok()) fits = CheckRankMemoryFits(c, stage, gpu, memory);
    if (fits.ok()) {
      std::cout << StrFormat("  stage %d fits %s\n", stage, memory.where.c_str());
    } else {
      LogError(fits.message());
      s = fits;
    }
  }
  return s.exit_code();
}

}  // namespace trainer
