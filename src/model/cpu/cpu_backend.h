// CpuBackend: the fp32 reference implementation of trainer::Backend on host memory. Backend's
// public ops check each op's contract (backend.cpp, op_contracts.cpp); the Run* hooks here call
// the raw kernels of cpu_kernels.h, one layer per file (embedding.cpp, layernorm.cpp, ...). The
// CPU adds no limits of its own to the contracts (its compute dtype, f32, is what they ask for).
#pragma once

#include <array>
#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/backend.h"

namespace trainer {

// Not final: engine_test gives the phase timer a CpuBackend with a clock the test sets.
class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  DType compute_dtype() const override { return DType::kF32; }
  bool device_memory() const override { return false; }

  Status Allocate(size_t bytes, void** out) override;
  void Free(void* ptr) override;
  size_t PeakAllocatedBytes() const override;
  Status CopyToDevice(void* dst, const void* host_src, size_t bytes) override;
  Status CopyToHost(void* host_dst, const void* src, size_t bytes) override;
  Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes) override;
  Status Zero(Tensor t) override;
  Status Synchronize() override { return Status::Ok(); }
  Status Mark(int index) override;
  Status SecondsBetween(int from, int to, double* seconds) override;

 protected:
  Status RunConvert(Tensor dst, Tensor src) override;
  Status RunEmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                             int vocab_start) override;
  Status RunEmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                              int vocab_start) override;
  Status RunLayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight,
                             Tensor bias) override;
  Status RunLayerNormBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor din_sums,
                              Tensor dout, Tensor in, Tensor weight, Tensor mean,
                              Tensor rstd) override;
  Status RunMatmulForward(Tensor out, Tensor pre_act, Tensor in, Tensor weight, Tensor bias,
                          Activation act) override;
  Status RunMatmulBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                           Tensor weight, GradientWrite dweight_write) override;
  Status RunGeluForward(Tensor out, Tensor in) override;
  Status RunGeluBackward(Tensor dx, Tensor dy, Tensor pre_act) override;
  Status RunColumnSums(Tensor out, Tensor in, int64_t first_column, Tensor row_weights) override;
  Status RunMatmulColumns(ColumnBlock out, GradientWrite out_write, ColumnBlock in, Tensor weight,
                          Tensor bias, float alpha) override;
  Status RunMatmulBackwardColumns(ColumnBlock din, GradientWrite din_write, Tensor dweight,
                                  ColumnBlock dout, ColumnBlock in, Tensor weight,
                                  float alpha) override;
  Status RunAttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                             int num_kv_heads, const DropoutKey& dropout, Tensor doc_starts,
                             const DocumentShape& documents) override;
  Status RunAttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                              int num_heads, int num_kv_heads, const DropoutKey& dropout,
                              Tensor doc_starts, const DocumentShape& documents) override;
  Status RunDropout(Tensor out, Tensor in, Tensor residual, const DropoutKey& key) override;
  Status RunAdd(Tensor out, Tensor a, Tensor b) override;
  Status RunAddInPlace(Tensor out, Tensor a) override;
  Status RunCrossEntropyRowMax(Tensor row_max, Tensor logits, int vocab_start,
                               int vocab_size) override;
  Status RunCrossEntropySums(Tensor sums, Tensor logits, Tensor row_max, Tensor targets,
                             int vocab_start, int vocab_size) override;
  Status RunCrossEntropyBackward(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                                 Tensor sums, Tensor targets, int vocab_start, int vocab_size,
                                 float dloss_scale) override;
  Status RunAdamW(Tensor param, Tensor master, Tensor grad, Tensor m, Tensor v,
                  const AdamWParams& p) override;
  Status RunMasterHalves(Tensor master, Tensor param, Tensor remainder, bool join) override;
  Status RunSumInto(Tensor total, Tensor x, SumOf what, bool accumulate) override;
  Status RunScale(Tensor x, float s) override;
  Status RunRmsNormForward(Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps) override;
  Status RunRmsNormBackward(Tensor din, Tensor dweight, Tensor dout, Tensor in, Tensor weight,
                            Tensor rstd) override;
  Status RunQkNormForward(Tensor out, Tensor rstd, Tensor in, Tensor q_weight, Tensor k_weight,
                          int num_heads, int num_kv_heads, float eps) override;
  Status RunQkNormBackward(Tensor din, Tensor dq_weight, Tensor dk_weight, Tensor dout, Tensor in,
                           Tensor q_weight, Tensor k_weight, Tensor rstd, int num_heads,
                           int num_kv_heads) override;
  Status RunRope(Tensor qkv, Tensor cos_sin, int num_heads, int num_kv_heads, bool inverse,
                 Tensor doc_starts) override;
  Status RunSwiGluForward(Tensor out, Tensor gate_up) override;
  Status RunSwiGluBackward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) override;
  Status RunMoeRouterForward(Tensor weights, Tensor experts, Tensor probs, Tensor lse,
                             Tensor logits, Tensor bias, const MoeRouting& r) override;
  Status RunMoeRouterBackward(Tensor dlogits, Tensor dweights, Tensor logits, Tensor probs,
                              Tensor experts, Tensor weights, Tensor aux_coef, float z_scale,
                              const MoeRouting& r) override;
  Status RunMoeRouterLosses(Tensor aux_coef, Tensor losses, Tensor experts, Tensor probs,
                            Tensor lse, const MoeLossCoefficients& c) override;
  Status RunMoeDispatchSlots(Tensor slots, Tensor counts, Tensor experts,
                             int64_t capacity) override;
  Status RunMoeScatterRows(Tensor out, Tensor in, Tensor slots, Tensor weights) override;
  Status RunMoeGatherRows(Tensor out, Tensor in, Tensor slots, Tensor weights,
                          bool accumulate) override;
  Status RunMoeSlotDots(Tensor dweights, Tensor dout, Tensor in, Tensor slots) override;

 private:
  // Attention's per-thread rows of probabilities: grown on the first call of a shape, then
  // reused, so the step loop does not allocate after its first step.
  float* AttentionScratch(int T, int HS);
  std::vector<float> attention_scratch_;
  std::array<std::chrono::steady_clock::time_point, kMaxMarks> marks_{};

 private:
  // Allocate's bytes in use (as rounded) and their high-water mark, for the memory check.
  mutable std::mutex allocation_mutex_;
  std::unordered_map<void*, size_t> allocated_;
  size_t in_use_ = 0, peak_ = 0;
};

}  // namespace trainer
