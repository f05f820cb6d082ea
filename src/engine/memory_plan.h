// The memory one rank of a layout needs: the arena that Trainer::Setup reserves (the model's
// buffers and the optimizer's state, counted by the code that allocates them) and, on a GPU, what
// the device needs beside it. `trainer plan` prints it; `trainer check` and `trainer train` hold
// it against the memory the rank has, before anything large is allocated.
#pragma once

#include <string>

#include "common/status.h"
#include "config/train_config.h"
#include "model/gpt.h"

namespace trainer {

// Device memory outside the arena on an H200 (CUDA 13 driver, cuDNN 9.19) for the CUDA context,
// cuBLASLt's and cuDNN's kernels and workspaces and the backend's scratch, beside cuDNN's attention
// backward workspace (whose f32 dQ accumulator is (B*T, C/tp)). From `memory_gib`
// (cudaMemGetInfo) against the arena of nine runs (1.3B at B=8-20, 350M at B=16, 96 and 128, 124M
// at B=32 and 128): 1.93-1.95 GiB while every run also built three NCCL communicators of one GPU
// (tp, dp, pp), which groups of one member no longer make (nccl_bootstrap.cpp): 1.94 less three
// kNcclCommunicatorBytes.
constexpr double kGpuBaseBytes = 0.76 * 1024 * 1024 * 1024;
// One NCCL communicator's own device memory before any peer's buffers: when runs on one GPU
// built four more of them (sharding, replica, ep, expert_dp), their memory rose by 1.55-1.59 GiB
// on H100s and H200s for every model. Counted for each communicator of more than one member
// with Distributed.gpu_collectives=nccl (groups of the same ranks share one, device_groups.h); the
// buffers NCCL adds for its peers come on top.
constexpr double kNcclCommunicatorBytes = 0.39 * 1024 * 1024 * 1024;
// GPU memory in use beyond a rank's base that its memory error puts down to other processes (well
// above what NCCL's buffers take where communicators exist by the check).
constexpr double kHeldElsewhereBytes = 4.0 * 1024 * 1024 * 1024;

struct RankMemory {
  int layers = 0, slots = 0;
  size_t parameters = 0;  // trained elements on this rank
  size_t frozen = 0;  // LoRA: frozen base elements on this rank (weights only, in model.parameters)
  ModelBufferBytes model;  // the model's buffers, by kind
  size_t optimizer = 0;    // master weights, Adam moments (a shard), the norm
  size_t offloaded = 0;    // sharding_offload: host memory for the shard's state and its staging
  double device_base = 0;  // GPU: context, libraries, their workspaces
  double attention_workspace = 0;  // GPU: cuDNN's attention backward workspace
  int nccl_groups = 0;             // GPU: the device groups with an NCCL communicator
  double nccl = 0;                 // GPU: their communicators (kNcclCommunicatorBytes each)
  // Weights, gradients and the optimizer's state.
  size_t state() const { return model.parameters + model.gradients + optimizer; }
  size_t arena() const { return model.total() + optimizer; }
  double total() const { return arena() + device_base + nccl + attention_workspace; }
};

// A rank of pipeline stage `stage`, computing in `compute_dtype` on a GPU (`device`) or the CPU,
// with `micro_batch` sequences per micro-batch (0: Global.micro_batch_size) and the config's
// Model.recompute (or `recompute` where given).
RankMemory PlanRankMemory(const TrainConfig& config, int stage, DType compute_dtype, bool device,
                          int micro_batch = 0, const std::string& recompute = "");

// Weights, gradients and optimizer state of the same rank without sharding (for comparison).
size_t PlanUnshardedState(const TrainConfig& config, int stage, DType compute_dtype, bool device);

// The compute dtype that `trainer train` would use: Engine.mix_precision on a GPU, f32 on the CPU.
DType PlannedComputeDtype(const TrainConfig& config, bool device);

// The memory a rank has: what holds it ("cuda:0 (NVIDIA H200)", "host n1 (a quarter, for its 4
// ranks)"), how many bytes it holds in all and how many are free now (for this rank), and where
// the free figure comes from.
struct RankMemoryAvailable {
  std::string where;
  double capacity = 0, free_now = 0;
  std::string source;
};

// Whether a rank of stage `stage` fits: its total within the capacity, and what is still to be
// allocated (the arena, and on a GPU cuDNN's workspace) within the free memory. The error names
// the need, the memory, on a GPU the memory that other processes hold when freeing it would do,
// the largest micro-batch that fits and keeps the global batch, and whether recomputation would do.
// *summary (when given) gets the line to print when it fits.
Status CheckRankMemoryFits(const TrainConfig& config, int stage, bool device,
                           const RankMemoryAvailable& available, std::string* summary = nullptr);

// sharding_offload: whether the host memory free for this rank (`host`: its share of its host's)
// holds the offloaded optimizer state and its staging ring, and on CPU ranks the arena beside
// them. The error names the need, the memory and the ways out. Ok when offload is off.
Status CheckOffloadFitsHost(const TrainConfig& config, int stage, bool device,
                            const RankMemoryAvailable& host);

}  // namespace trainer
