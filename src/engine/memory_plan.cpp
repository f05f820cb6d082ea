// The memory of one rank (memory_plan.h).
#include "engine/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "common/device_groups.h"
#include "common/log.h"
#include "engine/pipeline.h"
#include "model/model_spec.h"
#include "model/parameters.h"
#include "optimizer/adamw.h"

namespace trainer {
namespace {

// What a rank still has to allocate once its backend is up: the arena, and cuDNN's workspace.
double StillToAllocate(const RankMemory& m) {
  return m.arena() + m.attention_workspace;
}

bool Fits(const RankMemory& m, const RankMemoryAvailable& available) {
  return m.total() <= available.capacity && StillToAllocate(m) <= available.free_now;
}

// The largest micro-batch below Global.micro_batch_size that keeps the global batch (it divides
// the sequences each DP rank takes per step; with Model.sequence_parallel its tokens split over
// TP) and fits; 0 when none does. A rank's memory grows with the micro-batch, so a binary search
// over the candidates (the divisors, found in O(sqrt(n))) plans a handful of them, at any size.
int LargestMicroBatchThatFits(const TrainConfig& config, int stage, DType dtype, bool device,
                              const RankMemoryAvailable& available) {
  const int per_rank = config.global.global_batch_size / config.distributed.data_parallel_size();
  const int64_t T = config.model.sequence_length(), tp = config.distributed.tp_degree;
  std::vector<int> candidates;  // ascending
  std::vector<int> large;       // per_rank / d for each small divisor d, descending
  for (int64_t d = 1; d * d <= per_rank; ++d) {
    if (per_rank % d != 0) continue;
    candidates.push_back(static_cast<int>(d));
    if (d * d != per_rank) large.push_back(static_cast<int>(per_rank / d));
  }
  candidates.insert(candidates.end(), large.rbegin(), large.rend());
  const int B = config.global.micro_batch_size;
  candidates.erase(
      std::remove_if(
          candidates.begin(), candidates.end(),
          [&](int b) { return b >= B || (config.model.sequence_parallel && b * T % tp != 0); }),
      candidates.end());
  // The first candidate that does not fit, then the one before it.
  size_t low = 0, high = candidates.size();
  while (low < high) {
    const size_t mid = (low + high) / 2;
    if (Fits(PlanRankMemory(config, stage, dtype, device, candidates[mid]), available))
      low = mid + 1;
    else
      high = mid;
  }
  return low == 0 ? 0 : candidates[low - 1];
}

}  // namespace

DType PlannedComputeDtype(const TrainConfig& config, bool device) {
  return device && config.engine.mix_precision == "bf16" ? DType::kBF16 : DType::kF32;
}

RankMemory PlanRankMemory(const TrainConfig& config, int stage, DType compute_dtype, bool device,
                          int micro_batch, const std::string& recompute) {
  ModelConfig model = config.model;
  if (!recompute.empty()) model.recompute = recompute;
  const DistributedConfig& d = config.distributed;
  const int B = micro_batch > 0 ? micro_batch : config.global.micro_batch_size;
  const ModelPartition part = MakePartition(model, d, 0, stage, 0, d.ep_degree);
  const std::vector<ParameterInfo> params = BuildParameterList(model, part);
  RankMemory m;
  m.layers = part.num_layers;
  // 1F1B keeps up to one slot per micro-batch in flight: fewer, larger micro-batches keep fewer.
  const int micro_batches =
      std::max(1, config.global.global_batch_size / (B * d.data_parallel_size()));
  m.slots = PipelineStage::NumSlots(stage, d.pp_degree, micro_batches);
  m.parameters = TotalLocalElements(params);
  m.frozen = TotalLocalElements(BuildFrozenParameterList(model, part));
  m.model = GptModel::BufferBytes(model, part, compute_dtype, B, model.sequence_length(), m.slots);
  const bool offload = d.sharding.sharding_offload;
  m.optimizer = AdamW::BufferBytes(
      params, part.flat_shards, offload,
      AdamW::KeepsMasterHalves(config.optimizer, compute_dtype, part.flat_shards, offload));
  if (offload) m.offloaded = AdamW::OffloadedBytes(params, part.flat_shards, compute_dtype);
  if (device) {
    m.device_base = kGpuBaseBytes;
    // The communicators of more than one member that build NCCL (run_context.cpp's device
    // groups, device_groups.h: a group of one copies without NCCL, groups of the same ranks share
    // one).
    const Topology t = d.topology(d.tp_degree * d.data_parallel_size() * d.pp_degree);
    if (!d.host_staged())
      m.nccl_groups = CountOwnCommunicators(
          PlanDeviceGroups(t, stage, d.overlap_grad_reduce, d.sharding_on_own_stream()));
    m.nccl = m.nccl_groups * kNcclCommunicatorBytes;
    // cuDNN's attention backward: dQ's f32 accumulator, 4 bytes per query channel and token; with
    // grouped-query attention as much again (the keys' and values' gradients per query head
    // before their sums). Measured on an H200 (total minus free), this puts the plan within
    // 0.05 GiB of Llama-3.2-1B and Qwen3-0.6B at 8 x 2048, with and without recomputation (it was
    // 0.14-0.19 GiB short with the dQ term alone, on the head's width of the hidden size).
    const ModelSpec spec = MakeModelSpec(model);
    const double per_gqa = spec.kv_heads < spec.heads ? 2.0 : 1.0;
    m.attention_workspace =
        per_gqa * 4.0 * B * model.sequence_length() * spec.q_width() / d.tp_degree;
  }
  return m;
}

size_t PlanUnshardedState(const TrainConfig& config, int stage, DType compute_dtype, bool device) {
  TrainConfig whole = config;
  whole.distributed.sharding.sharding_degree = 1;
  return PlanRankMemory(whole, stage, compute_dtype, device).state();
}

Status CheckRankMemoryFits(const TrainConfig& config, int stage, bool device,
                           const RankMemoryAvailable& available, std::string* summary) {
  const DType dtype = PlannedComputeDtype(config, device);
  const int B = config.global.micro_batch_size;
  const RankMemory need = PlanRankMemory(config, stage, dtype, device);
  std::string memory = available.where + " holds " + FormatBytes(available.capacity);
  if (available.free_now != available.capacity)
    memory += ", " + FormatBytes(available.free_now) + " free";
  memory += " (" + available.source + ")";
  const std::string needs =
      StrFormat("a rank of pipeline stage %d needs ~%s at Global.micro_batch_size=%d", stage,
                FormatBytes(need.total()).c_str(), B);
  if (Fits(need, available)) {
    if (summary != nullptr) *summary = needs + " (trainer plan); " + memory;
    return Status::Ok();
  }
  std::vector<std::string> fixes;
  // On a GPU, what is in use beyond this rank's own base (its context and libraries, which it
  // holds by now) belongs to other processes: another job, or the last run still exiting. When
  // the rank would fit without them, freeing the GPU is the first way out.
  const double held_elsewhere =
      available.capacity - available.free_now - need.device_base - need.nccl;
  if (device && held_elsewhere > kHeldElsewhereBytes && need.total() <= available.capacity)
    fixes.push_back(StrFormat("free %s: other processes hold ~%s of it (nvidia-smi lists them)",
                              available.where.c_str(), FormatBytes(held_elsewhere).c_str()));
  // The ways out, each checked: the largest smaller micro-batch that keeps the global batch (it
  // divides the sequences each DP rank takes per step; with Model.sequence_parallel its tokens
  // split over TP), and recomputation at this micro-batch.
  const int smaller = LargestMicroBatchThatFits(config, stage, dtype, device, available);
  if (smaller > 0)
    fixes.push_back(StrFormat(
        "set Global.micro_batch_size=%d (~%s, the same global batch)", smaller,
        FormatBytes(PlanRankMemory(config, stage, dtype, device, smaller).total()).c_str()));
  // Model.recompute saves more from none to gelu to selective to block.
  const std::vector<std::string> order = {"none", "gelu", "selective", "block"};
  const auto rank = [&](const std::string& mode) {
    return std::find(order.begin(), order.end(), mode) - order.begin();
  };
  for (const char* recompute : {"gelu", "selective", "block"}) {
    if (rank(recompute) <= rank(config.model.recompute)) continue;
    const RankMemory recomputed = PlanRankMemory(config, stage, dtype, device, 0, recompute);
    if (!Fits(recomputed, available)) continue;
    fixes.push_back(StrFormat("set Model.recompute=%s (~%s)", recompute,
                              FormatBytes(recomputed.total()).c_str()));
    break;
  }
  // Tensor parallelism leaves the experts whole on each rank (no expert TP): EP splits them.
  fixes.push_back(StrFormat("spread the model over more %s (Distributed.tp_degree, pp_degree%s)",
                            device ? "GPUs" : "ranks",
                            !config.model.moe() ? ""
                            : device            ? "; the experts over Distributed.ep_degree, with "
                                                  "Distributed.gpu_collectives=mpi"
                                                : "; the experts over Distributed.ep_degree"));
  std::string fix_text;  // never empty: the last way out always stands
  for (size_t i = 0; i < fixes.size(); ++i)
    fix_text += (i == 0 ? "" : (i + 1 == fixes.size() ? ", or " : ", ")) + fixes[i];
  fix_text[0] = static_cast<char>(std::toupper(fix_text[0]));
  return UsageError(StrFormat("%s (trainer plan prints the parts), but %s. %s", needs.c_str(),
                              memory.c_str(), fix_text.c_str()));
}

Status CheckOffloadFitsHost(const TrainConfig& config, int stage, bool device,
                            const RankMemoryAvailable& host) {
  if (!config.distributed.sharding.sharding_offload) return Status::Ok();
  const RankMemory m = PlanRankMemory(config, stage, PlannedComputeDtype(config, device), device);
  const double need = m.offloaded + (device ? 0.0 : static_cast<double>(m.arena()));
  if (need <= host.free_now) return Status::Ok();
  return UsageError(StrFormat(
      "sharding_offload keeps ~%s of optimizer state and staging in host memory per rank%s "
      "(trainer plan), but %s has %s free (%s). Free host memory, run fewer ranks per host, "
      "shard the state over more ranks (Distributed.sharding.sharding_degree), or set "
      "Distributed.sharding.sharding_offload=false",
      FormatBytes(static_cast<double>(m.offloaded)).c_str(),
      device ? "" : StrFormat(" beside the ~%s arena", FormatBytes(m.arena()).c_str()).c_str(),
      host.where.c_str(), FormatBytes(host.free_now).c_str(), host.source.c_str()));
}

}  // namespace trainer
