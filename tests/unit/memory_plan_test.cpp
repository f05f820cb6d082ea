// The memory plan of one rank (src/engine/memory_plan.h) against closed-form counts of a tiny GPT
// whose every buffer is a multiple of the 256-byte allocation unit, and the fit check's choice of
// the way out (the largest micro-batch that fits and divides the global batch, recomputation),
// and the offloaded optimizer's host bytes for configs/llama-3.1-8b.yaml.
#include "engine/memory_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "config/config_loader.h"

namespace trainer {
namespace {

constexpr int64_t kV = 384, kC = 64, kT = 64, kL = 2, kH = 4;  // vocabulary 257 padded to 384

TrainConfig TinyConfig(int micro_batch, int global_batch) {
  TrainConfig c;
  c.model.vocab_size = 257;
  c.model.vocab_pad_multiple = 128;
  c.model.hidden_size = kC;
  c.model.num_layers = kL;
  c.model.num_heads = kH;
  c.model.max_seq_len = kT;
  c.global.micro_batch_size = micro_batch;
  c.global.global_batch_size = global_batch;
  c.distributed.dp_degree = 1;
  return c;
}

// GPT-2's tensors: wte, wpe, per block 2 LayerNorms, qkv, projection, fc, fc projection (with
// biases), the final LayerNorm.
constexpr int64_t kParams =
    kV * kC + kT * kC +
    kL * (4 * kC + 3 * kC * kC + 3 * kC + kC * kC + kC + 4 * kC * kC + 4 * kC + 4 * kC * kC + kC) +
    2 * kC;

TEST(MemoryPlan, TheModelsBuffersByKindInClosedForm) {
  const int64_t B = 3, N = B * kT;
  const RankMemory m = PlanRankMemory(TinyConfig(B, 3), 0, DType::kF32, false);
  EXPECT_EQ(m.parameters, static_cast<size_t>(kParams));
  EXPECT_EQ(m.model.parameters, static_cast<size_t>(4 * kParams));
  EXPECT_EQ(m.model.gradients, static_cast<size_t>(4 * kParams));
  // Master weights and two moments (f32), and the f64 norm in one 256-byte unit.
  EXPECT_EQ(m.optimizer, static_cast<size_t>(12 * kParams + 256));
  // Per token and block: ln1 out, qkv (3C), attention out, residual mid, ln2 out, fc pre and out
  // (4C each), residual out = 16C, two LayerNorms' mean and rstd, a softmax stat per head. Per
  // token of the slot: tokens, targets and document starts, the stage input, the final LayerNorm
  // (C, mean, rstd).
  const int64_t activations = N * (kL * (16 * kC + 4 + kH) + 3 + kC + kC + 2);
  EXPECT_EQ(m.model.activations, static_cast<size_t>(4 * activations));
  // Logits (their gradient in place), losses, row max, two sums per row; the f64 loss sum.
  EXPECT_EQ(m.model.logits, static_cast<size_t>(4 * N * (kV + 4) + 256));
  // Backward scratch: projection out, residual gradient, dln (C each), dqkv (3C), datt (C), dfc
  // (4C).
  EXPECT_EQ(m.model.scratch, static_cast<size_t>(4 * N * 11 * kC));
  EXPECT_EQ(m.device_base, 0.0);
  EXPECT_EQ(m.total(), static_cast<double>(m.arena()));

  // bf16 halves the compute-dtype buffers; the master weights are then the bf16 weights and
  // 2-byte remainders (Optimizer.store_param_remainders; f32 as on the CPU without it). The GPU
  // adds its base and cuDNN's f32 dQ.
  const RankMemory g = PlanRankMemory(TinyConfig(B, 3), 0, DType::kBF16, true);
  EXPECT_EQ(g.model.parameters, static_cast<size_t>(2 * kParams));
  EXPECT_EQ(g.model.gradients, m.model.gradients);
  EXPECT_EQ(g.optimizer, static_cast<size_t>(10 * kParams + 256));
  TrainConfig f32_master = TinyConfig(B, 3);
  f32_master.optimizer.store_param_remainders = false;
  EXPECT_EQ(PlanRankMemory(f32_master, 0, DType::kBF16, true).optimizer, m.optimizer);
  EXPECT_EQ(g.attention_workspace, 4.0 * N * kC);
  EXPECT_EQ(g.total(), g.arena() + kGpuBaseBytes + 4.0 * N * kC);
  // Grouped-query attention (2 kv heads of 4) with 64-wide heads (a query width of 256): dQ's f32
  // accumulator over the query width, and as much again for the keys' and values' gradients per
  // query head; with TP the rank's heads only.
  TrainConfig llama = TinyConfig(B, 3);
  llama.model.arch = "llama";
  llama.model.num_kv_heads = 2;
  llama.model.head_dim = 64;
  EXPECT_EQ(PlanRankMemory(llama, 0, DType::kBF16, true).attention_workspace,
            2 * 4.0 * N * kH * 64);
  llama.distributed.tp_degree = 2;
  EXPECT_EQ(PlanRankMemory(llama, 0, DType::kBF16, true).attention_workspace,
            2 * 4.0 * N * kH * 64 / 2);
}

// The device communicators of more than one rank each hold NCCL's buffers
// (kNcclCommunicatorBytes) in the GPU's total: one per distinct set of ranks (groups with the same
// ranks share one; the embedding group on the first and last pipeline stages only); groups of one
// rank, CPU ranks and host-staged collectives hold none. Counted by hand from each layout's groups.
TEST(MemoryPlan, EachCommunicatorOfMoreThanOneRankAddsNcclBuffers) {
  auto groups = [](int tp, int dp, int pp, int sharding, int ep, const char* collectives,
                   bool overlap_dp = false, int stage = 1) {
    TrainConfig c = TinyConfig(2, 2 * dp * sharding);
    c.distributed.tp_degree = tp, c.distributed.dp_degree = dp, c.distributed.pp_degree = pp;
    c.distributed.sharding.sharding_degree = sharding, c.distributed.ep_degree = ep;
    c.distributed.sharding.sharding_stage = stage;
    c.distributed.gpu_collectives = collectives;
    c.distributed.overlap_grad_reduce = overlap_dp;
    const RankMemory m = PlanRankMemory(c, 0, DType::kBF16, true);
    EXPECT_EQ(m.nccl, m.nccl_groups * kNcclCommunicatorBytes);
    EXPECT_EQ(m.total(), m.arena() + kGpuBaseBytes + m.attention_workspace + m.nccl);
    return m.nccl_groups;
  };
  EXPECT_EQ(groups(1, 1, 1, 1, 1, "nccl"), 0);  // one GPU: every group has one rank
  EXPECT_EQ(groups(2, 1, 1, 1, 1, "nccl"), 1);  // tp
  EXPECT_EQ(groups(1, 1, 2, 1, 1, "nccl"), 1);  // pp; stage 0's embedding group is the same two
  // dp 4: the data-parallel group, the replicas and the expert-dp group are the same four ranks;
  // with the dp group reducing on its own stream, it has its own.
  EXPECT_EQ(groups(1, 4, 1, 1, 1, "nccl"), 1);
  EXPECT_EQ(groups(1, 4, 1, 1, 1, "nccl", true), 2);
  // dp 4 with ep 2: dp and the replicas (four ranks), ep 2, expert-dp 2.
  EXPECT_EQ(groups(1, 4, 1, 1, 2, "nccl"), 3);
  // tp 2 x dp 2 x ep 2: tp, dp (= replicas = ep).
  EXPECT_EQ(groups(2, 2, 1, 1, 2, "nccl"), 2);
  // sharding 2 of one replica: dp and sharding are the same two ranks; at stage 2 the sharding
  // group reduces on its own stream and has its own.
  EXPECT_EQ(groups(1, 1, 1, 2, 1, "nccl"), 1);
  EXPECT_EQ(groups(1, 1, 1, 2, 1, "nccl", false, 2), 2);
  // sharding 2 x 2 replicas: dp (4), sharding (2), replicas (2, = expert-dp).
  EXPECT_EQ(groups(1, 2, 1, 2, 1, "nccl"), 3);
  EXPECT_EQ(groups(2, 4, 2, 1, 1, "mpi"), 0);  // host-staged: no NCCL
  TrainConfig c = TinyConfig(2, 8);
  c.distributed.dp_degree = 4;
  EXPECT_EQ(PlanRankMemory(c, 0, DType::kF32, false).nccl, 0.0);  // CPU ranks
  // pp 4: the middle stages hold no embedding group; the last one does (its own two ranks).
  c = TinyConfig(2, 8);
  c.model.num_layers = 4;
  c.distributed.pp_degree = 4;
  EXPECT_EQ(PlanRankMemory(c, 1, DType::kBF16, true).nccl_groups, 1);
  EXPECT_EQ(PlanRankMemory(c, 3, DType::kBF16, true).nccl_groups, 2);
}

// sharding_offload on configs/llama-3.1-8b.yaml, the Llama-3.1-8B shape (8,030,261,248
// parameters, Meta's count): the host keeps 12 bytes per parameter (master weights, two moments)
// and a ring of two 32 Mi-element staging slots (gradients and weights in f32, weights in bf16:
// 640 MiB), not the whole-shard staging of 10 more bytes per parameter; 91 GiB, within a 128 GiB
// host. On the GPU it fits an H200 (139 GiB).
TEST(MemoryPlan, OffloadKeepsTwelveBytesPerParameterAndTheRingOnTheHost) {
  StatusOr<TrainConfig> config =
      LoadConfig(std::string(TRAINER_SOURCE_DIR) + "/configs/llama-3.1-8b.yaml", {});
  ASSERT_TRUE(config.ok()) << config.status().message();
  ASSERT_TRUE(config->distributed.sharding.sharding_offload);
  config->distributed.dp_degree = 1;
  const RankMemory m = PlanRankMemory(config.value(), 0, DType::kBF16, true);
  const size_t n = 8030261248;
  EXPECT_EQ(m.parameters, n);
  EXPECT_EQ(m.offloaded, 12 * n + (size_t{640} << 20));
  EXPECT_LT(m.offloaded, size_t{92} << 30);
  EXPECT_EQ(m.optimizer, Backend::AllocationSize(sizeof(double)));  // the state is not on the GPU
  EXPECT_LT(m.total(), 139.0 * (1 << 30));
}

TEST(MemoryPlan, RecomputationKeepsLessPerSlot) {
  const RankMemory none = PlanRankMemory(TinyConfig(4, 4), 0, DType::kF32, false);
  const RankMemory gelu = PlanRankMemory(TinyConfig(4, 4), 0, DType::kF32, false, 0, "gelu");
  const RankMemory block = PlanRankMemory(TinyConfig(4, 4), 0, DType::kF32, false, 0, "block");
  // gelu shares the GELU output (4C per token) of every block but the one shared set.
  EXPECT_EQ(none.model.activations - gelu.model.activations,
            static_cast<size_t>(4 * 4 * kT * (kL - 1) * 4 * kC));
  EXPECT_LT(block.model.activations, gelu.model.activations);
  EXPECT_EQ(block.model.scratch, none.model.scratch);
}

TEST(MemoryPlan, ASmallerMicroBatchKeepsMoreSlotsInFlightUnder1F1B) {
  TrainConfig c = TinyConfig(8, 8);
  c.distributed.pp_degree = 2;
  // Stage 0 of 2 keeps min(2, micro-batches) slots: one micro-batch of 8, or four of 2.
  EXPECT_EQ(PlanRankMemory(c, 0, DType::kF32, false).slots, 1);
  const RankMemory two = PlanRankMemory(c, 0, DType::kF32, false, 2);
  EXPECT_EQ(two.slots, 2);
  EXPECT_EQ(PlanRankMemory(c, 1, DType::kF32, false, 2).slots, 1);
}

RankMemoryAvailable Room(double bytes) {
  RankMemoryAvailable a;
  a.where = "host test";
  a.capacity = 1e15;
  a.free_now = bytes;
  a.source = "a test";
  return a;
}

TEST(MemoryPlan, FitsOrNamesTheLargestMicroBatchThatKeepsTheGlobalBatch) {
  const TrainConfig c = TinyConfig(8, 8);  // micro-batches that keep it: 8, 4, 2, 1
  auto need = [&](int b) {
    return static_cast<double>(PlanRankMemory(c, 0, DType::kF32, false, b).arena());
  };
  std::string summary;
  EXPECT_TRUE(CheckRankMemoryFits(c, 0, false, Room(need(8)), &summary).ok());
  EXPECT_NE(summary.find("needs ~"), std::string::npos) << summary;
  // Room for 3 but not 4: 3 does not divide 8, so the answer is 2.
  const Status s = CheckRankMemoryFits(c, 0, false, Room((need(3) + need(4)) / 2));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ExitCode::kUsage);
  EXPECT_NE(s.message().find("Set Global.micro_batch_size=2 ("), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("spread the model over more ranks"), std::string::npos);
  EXPECT_EQ(s.message().find("ep_degree"), std::string::npos) << s.message();  // no experts
  // A MoE model: tensor parallelism leaves the experts whole, so the way out names EP too.
  TrainConfig moe = c;
  moe.model.arch = "llama";
  moe.model.num_experts = 4;
  const Status e = CheckRankMemoryFits(moe, 0, false, Room(1));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("the model over more ranks (Distributed.tp_degree, "
                             "pp_degree; the experts over Distributed.ep_degree)"),
            std::string::npos)
      << e.message();
  // Room for block recomputation at B=8 but not for gelu's.
  const double block = PlanRankMemory(c, 0, DType::kF32, false, 0, "block").arena();
  const Status r = CheckRankMemoryFits(c, 0, false, Room(block));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("set Model.recompute=block"), std::string::npos) << r.message();
  EXPECT_EQ(r.message().find("recompute=gelu"), std::string::npos) << r.message();
}

// sharding_offload: the host's free memory must hold the offloaded state and ring (a GPU rank)
// or those and the arena (a CPU rank); else one line with the need and the ways out.
TEST(MemoryPlan, OffloadedStateMustFitTheHostsFreeMemory) {
  TrainConfig c = TinyConfig(2, 2);
  EXPECT_TRUE(CheckOffloadFitsHost(c, 0, true, Room(0)).ok());  // offload off: nothing to hold
  c.distributed.sharding.sharding_offload = true;
  const RankMemory gpu = PlanRankMemory(c, 0, DType::kBF16, true);
  const RankMemory cpu = PlanRankMemory(c, 0, DType::kF32, false);
  ASSERT_GT(gpu.offloaded, 0u);
  EXPECT_TRUE(CheckOffloadFitsHost(c, 0, true, Room(gpu.offloaded)).ok());
  const Status s = CheckOffloadFitsHost(c, 0, true, Room(gpu.offloaded - 1));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ExitCode::kUsage);
  EXPECT_NE(s.message().find("sharding_offload keeps ~"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("host test has"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Distributed.sharding.sharding_offload=false"), std::string::npos);
  EXPECT_TRUE(CheckOffloadFitsHost(c, 0, false, Room(cpu.offloaded + cpu.arena())).ok());
  const Status t = CheckOffloadFitsHost(c, 0, false, Room(cpu.offloaded + cpu.arena() - 1));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("arena"), std::string::npos) << t.message();
}

TEST(MemoryPlan, OnAGpuTheTotalMustFitItsMemoryAndTheArenaItsFreeMemory) {
  const TrainConfig c = TinyConfig(8, 8);
  const RankMemory m = PlanRankMemory(c, 0, DType::kBF16, true);
  RankMemoryAvailable gpu;
  gpu.where = "cuda:0 (a test GPU)";
  gpu.source = "a test";
  gpu.capacity = m.total();
  gpu.free_now = m.arena() + m.attention_workspace;  // the base is partly held already
  EXPECT_TRUE(CheckRankMemoryFits(c, 0, true, gpu).ok());
  gpu.capacity = m.total() - 1;
  EXPECT_FALSE(CheckRankMemoryFits(c, 0, true, gpu).ok());
  gpu.capacity = m.total();
  gpu.free_now -= 1;
  const Status s = CheckRankMemoryFits(c, 0, true, gpu);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuda:0 (a test GPU) holds"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("more GPUs"), std::string::npos) << s.message();
  // 1 byte short, and nothing held beyond the rank's base: nobody else to blame.
  EXPECT_EQ(s.message().find("other processes"), std::string::npos) << s.message();
}

TEST(MemoryPlan, OnAGpuMemoryHeldByOtherProcessesIsNamedWhenFreeingItWouldDo) {
  const TrainConfig c = TinyConfig(8, 8);
  const RankMemory m = PlanRankMemory(c, 0, DType::kBF16, true);
  const double gib = 1024.0 * 1024 * 1024;
  RankMemoryAvailable gpu;
  gpu.where = "cuda:0 (a test GPU)";
  gpu.source = "a test";
  // A GPU of the rank's total plus 10 GiB, of which another process holds 10.5 GiB: the rank's
  // arena no longer fits its free memory (its base is held already).
  gpu.capacity = m.total() + 10 * gib;
  gpu.free_now = gpu.capacity - m.device_base - 10.5 * gib;
  const Status s = CheckRankMemoryFits(c, 0, true, gpu);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Free cuda:0 (a test GPU): other processes hold ~10.5 GiB of it "
                             "(nvidia-smi lists them)"),
            std::string::npos)
      << s.message();
  // 3 GiB held elsewhere is below the threshold (NCCL's buffers, a second context).
  gpu.free_now = m.arena() + m.attention_workspace - 1;
  gpu.capacity = gpu.free_now + m.device_base + 3 * gib;
  const Status few = CheckRankMemoryFits(c, 0, true, gpu);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.message().find("other processes"), std::string::npos) << few.message();
}

}  // namespace
}  // namespace trainer
