// The mixture-of-experts layer (Qwen2-MoE, Mixtral, OLMoE, Qwen3-MoE; Megatron's MoE layer),
// which replaces a block's MLP where the model spec says (ModelSpec::moe_layer):
//
//   logits = x W_router^T (f32)                       (N, E)
//   scores -> top-k -> weights (MoeRouting)           (N, K)   lower expert index wins ties
//   permute: tokens grouped by expert, a stable counting sort (token order within an expert)
//   each expert e: y = down_e(silu(gate_e x) * up_e x) over its group (Backend's grouped GEMMs:
//   every expert's gate-up with its SwiGLU at once, every expert's down at once)
//   out[t] = sum over t's K experts, ascending, of w * y  (+ sigmoid(x g^T) * shared expert(x))
//
// Dropless by default: every token reaches its K experts. With a capacity factor cf, each expert
// takes at most ceil(cf * N * K / E) of the micro-batch's N tokens: the first ones in token order;
// the rest of its tokens are dropped for that expert (their weight for it counts as zero).
// The load-balancing (switch) loss and the router z-loss are added to the training objective
// through the router's backward; their values are kept for the metrics.
//
// Experts are not split by tensor parallelism: each TP rank computes the whole layer (its input
// is every row). With expert parallelism (MoeContext::ep) each rank holds E/ep of the experts and
// the permuted rows travel to them and back (moe_dispatch.h); without it, every expert.
#pragma once

#include <cstdint>
#include <vector>

#include "model/backend.h"
#include "model/model_spec.h"
#include "model/moe_dispatch.h"

namespace trainer {

// The routing of one micro-batch on the host: which permuted row each (token, choice) went to.
struct MoeDispatch {
  std::vector<int32_t> counts;   // (E) choices per expert before dropping
  std::vector<int64_t> offsets;  // (E+1) start of each expert's group of kept rows
  std::vector<ExpertRun> runs;   // the experts' work: groups of x_perm, or (EP) of x_recv
  ExpertExchange exchange;       // EP: the rows moved to and from the experts' ranks
  int64_t dropped = 0;           // choices dropped by the capacity
  float z_scale = 0.f;           // d(objective)/d(sum of lse^2) of this micro-batch
  float loss_scale = 0.f;        // MoeContext::loss_scale of the forward that made it
};

// Tokens per expert a micro-batch of `tokens` allows: ceil(cf * tokens * K / E), at most `tokens`
// (the same rule: an expert gets at most a row a token); 0: dropless.
int64_t MoeCapacity(const MoeSpec& spec, int64_t tokens);
// The dispatch of N tokens from the router's experts (N,K) (ascending per token) on the host: the
// stable counting sort by expert, then the capacity (earlier tokens first). *slots (N,K') gets
// each choice's permuted row (-1 if dropped; the shared expert's, k = K, is N*K + t), `out` the
// counts and groups. Backend's MoeDispatchSlots makes the same slots and counts on the device.
void PlanMoeDispatch(const MoeSpec& spec, const int32_t* experts, int64_t N,
                     std::vector<int32_t>* slots, MoeDispatch* out);
// The groups from d->counts: offsets, dropped and the runs (without EP) of N tokens' choices.
void PlanMoeGroups(const MoeSpec& spec, int64_t N, MoeDispatch* d);

// One MoE layer's figures, summed over a step's micro-batches on this rank.
struct MoeLayerStats {
  double aux_loss = 0;          // the load-balancing loss, coefficient included
  double z_loss = 0;            // the z-loss, coefficient included
  std::vector<int64_t> load;    // (E) tokens routed to each expert (before dropping)
  int64_t dropped = 0;
  int micro_batches = 0;
  void Clear();
};

// The layer's weights (or their gradients), whole on every TP rank; the experts this rank holds
// (E_l = E / ep of them, all E without expert parallelism).
struct MoeWeights {
  Tensor router;        // (E', C): E router rows, then the shared expert's gate (E' = E + 1)
  Tensor experts_gu;    // (E_l, 2F, C) [gate; up] of each expert
  Tensor experts_down;  // (E_l, C, F)
  Tensor shared_gu;     // (2Fs, C) or empty
  Tensor shared_down;   // (C, Fs)
  Tensor bias;          // (E) f32 the expert bias (moe_router_bias_update_rate), or empty
};

// What the backward needs from the forward of one micro-batch. K' = K (+1 with a shared expert).
struct MoeActivations {
  Tensor logits;    // (N,E') f32
  Tensor probs;     // (N,E) f32 scores
  Tensor lse;       // (N) f32
  Tensor weights;   // (N,K') f32
  Tensor experts;   // (N,K) i32
  Tensor slots;     // (N,K') i32, the permuted row of each choice (Backend::MoeDispatchSlots)
  Tensor counts;    // (E) i32 the choices per expert, copied to MoeDispatch::counts
  Tensor aux_coef;  // (G,E) f32 the load-balancing loss's gradient by score, empty without it
  Tensor losses;    // (2) f64 the micro-batch's aux and z losses (Backend::MoeRouterLosses)
  Tensor x_perm;    // (N*K', C) the tokens in expert order; the last N rows: the shared expert's
  Tensor x_recv;    // EP: (ep*N*K, C) the rows this rank's experts received; empty without EP
  Tensor y_recv;    // EP: (ep*N*K, C) their outputs, before they go back
  Tensor h, act;    // (R, 2F), (R, F) the experts' [gate|up] and SwiGLU output, R = ep*N*K
  Tensor shared_h, shared_act;  // (N, 2Fs), (N, Fs)
  Tensor y;         // (N*K', C) each row's expert output
  Tensor out;       // (N, C) the layer's output (shared by the layers: the block adds it at once)
  MoeDispatch* dispatch = nullptr;  // host routing of this slot's micro-batch
  MoeLayerStats* stats = nullptr;   // the layer's step figures
};

// The backward's buffers, shared by every MoE layer.
struct MoeScratch {
  Tensor dweights, dlogits;  // (N,K') f32, (N,E') f32
  Tensor dy, dx_perm;        // (N*K', C)
  Tensor dy_recv, dx_recv;   // EP: (R, C) the expert side's dy and dx, R = ep*N*K
  Tensor dh, dact;           // (R, 2F), (R, F)
  Tensor shared_dh, shared_dact;
  // Host memory for the dispatch's copies (Backend::AllocateHost: page-locked on a GPU, so that
  // they run ahead of the permutation queued behind them): (2) f64 losses, then (E) i32 counts.
  void* host_staging = nullptr;
};
// The copy mark (Backend::RecordCopies) of the MoE dispatch's copies; the offloaded optimizer's
// ring uses the first AdamW::kOffloadRingSlots, at another point of the step.
constexpr int kMoeCopyMark = Backend::kMaxCopyMarks - 1;
inline size_t MoeHostStagingBytes(int num_experts) {
  return 2 * sizeof(double) + static_cast<size_t>(num_experts) * sizeof(int32_t);
}

struct MoeContext {
  Backend* backend;
  const MoeSpec* spec;
  Communicator* ep = nullptr;  // the expert-parallel group; null or one member: no EP
  MoeScratch scratch;
  // Forward: d(objective)/d(this micro-batch's aux and z losses), and whether to add the
  // micro-batch to the stats (not on recomputation or evaluation).
  float loss_scale = 0.f;
  bool record = false;
  bool recompute = false;  // the forward again in backward: the first forward's loss_scale, no stats
  // Backward: x_perm is shared with other layers (Model.recompute=selective): scatter x again.
  bool rebuild_x_perm = false;
  // Backward: act is shared with other layers (Model.recompute gelu and selective): the experts'
  // backward makes it again from h (Backend::GroupedMatmulSwiGluBackward, kRemake).
  SwiGluAct act_source = SwiGluAct::kRead;
  GradientWrite weight_gradients = GradientWrite::kAccumulate;  // router and shared expert
  // Backward: where given, the experts' weight gradients add the sums of their squares to it
  // (one f64).
  Tensor grad_squares;
};

// x (B,T,C) -> a->out (B*T, C).
Status MoeForward(const MoeContext& ctx, const MoeWeights& w, Tensor x, const MoeActivations& a);
// dout (N,C) -> dx (N,C) overwritten; weight gradients into g (the experts' accumulate).
Status MoeBackward(const MoeContext& ctx, const MoeWeights& w, const MoeWeights& g, Tensor x,
                   const MoeActivations& a, Tensor dout, Tensor dx);

}  // namespace trainer
