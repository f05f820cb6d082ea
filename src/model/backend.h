// Backend: memory and the layer kernels that the GPT model is written against, once, for every
// device. CpuBackend (src/model/cpu/) is the fp32 reference; CudaBackend (src/model/cuda/) runs
// bf16 with fp32 master weights. Each public op checks its contract (the shapes and dtypes
// documented here) once for every backend (backend.cpp, op_contracts.cpp), then calls the
// backend's protected Run* hook, which checks only what its device adds and runs the kernel.
//
// Conventions
// - N = B*T rows; C = hidden size (or its local shard); tensors are row-major.
// - "compute" tensors (parameters as used by the forward pass, activations) have
//   compute_dtype(): f32 on CPU, bf16 on CUDA. Gradients of parameters, master weights, Adam
//   moments, LayerNorm statistics, attention statistics and losses are always f32.
// - Parameter-gradient outputs ACCUMULATE (+=) so that micro-batches add up, except where an op
//   takes a GradientWrite; activation-gradient outputs are OVERWRITTEN unless the op says
//   otherwise.
// - Weights are stored like PyTorch's nn.Linear: (out_features, in_features); y = x W^T + b.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "model/documents.h"
#include "model/philox.h"
#include "model/route_table.h"

namespace trainer {

enum class Activation { kNone, kGelu };

struct AdamWParams {
  float lr = 0.f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.f;
  int step = 1;            // 1-based, for bias correction
  float grad_scale = 1.f;  // multiplies the gradient first (clipping)
  // When set (one f64 in backend memory: the global sum of squares of the gradients), the scale
  // is taken from it on the device instead, GradientClipScale(sqrt(*it), max_grad_norm), so
  // the host need not wait for the norm.
  const double* grad_sum_squares = nullptr;
  double max_grad_norm = 0.0;
};

// How the MoE router turns logits into the chosen experts and their weights (moe_layer.h).
struct MoeRouting {
  int top_k = 1;
  bool sigmoid = false;         // scores sigmoid(logit), else softmax over the experts
  bool pre_softmax = true;      // softmax: choose by the softmax over all; else by the logits,
                                // then softmax over the chosen (Mixtral)
  bool norm_topk_prob = false;  // the chosen weights divided by their sum
  bool shared_gate = false;     // logits' last column gates a shared expert by its sigmoid
};

// One row group of a grouped matrix product (Backend::GroupedMatmulForward/Backward): rows
// [offset, offset + rows) of the row-side tensors, with matrix `expert` of the stacked weights
// (the MoE experts' runs, moe_dispatch.h).
struct ExpertRun {
  int64_t expert = 0;
  int64_t offset = 0;
  int64_t rows = 0;
};

// The router's losses of one micro-batch (MoeRouterLosses; moe_layer.h): the load-balancing
// loss's coefficient (0: none), the z-loss's (0: none), and d(objective)/d(these losses).
struct MoeLossCoefficients {
  bool sigmoid = false;  // the scores are sigmoids: normalised to sum 1 per token for the aux loss
  double aux = 0.0;      // MoeSpec::aux_loss_coeff
  double z = 0.0;        // MoeSpec::z_loss_coeff
  float loss_scale = 1.f;
};

// What SumInto adds up.
enum class SumOf { kValues, kSquares };

// How an op writes a parameter gradient: added to what is there (micro-batches add up), or over
// it (the step's first micro-batch, which then needs no zeroed buffer: for a GEMM, beta = 0
// instead of a memset and a read of the old values).
enum class GradientWrite { kAccumulate, kOverwrite };

// A SwiGLU output in the backward of the product that reads it (the MoE experts'
// GroupedMatmulSwiGluBackward, a dense MLP's down projection): the forward's, read; or made
// again from the product's input [gate | up] by the SwiGLU backward pass, before the weight
// gradient reads it (the layers share one buffer: Model.recompute gelu and selective).
enum class SwiGluAct { kRead, kRemake };

// Columns [first, first + cols) of the row-major matrix `whole` (rows, W): an operand of the
// column-block matrix products (Backend::MatmulColumns), its rows W apart.
struct ColumnBlock {
  Tensor whole;
  int64_t first = 0, cols = 0;
  int64_t rows() const { return Rows(whole); }
  int64_t ld() const { return Cols(whole); }
};
inline ColumnBlock Columns(Tensor whole, int64_t first, int64_t cols) {
  return {whole, first, cols};
}
inline ColumnBlock Columns(Tensor whole) { return {whole, 0, whole.empty() ? 0 : Cols(whole)}; }

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu" or "cuda:<device>"
  virtual DType compute_dtype() const = 0;
  virtual bool device_memory() const = 0;  // buffers are not host-addressable

  // ---- memory (allocation happens at setup, never inside the step loop) ----
  virtual Status Allocate(size_t bytes, void** out) = 0;  // zero-filled, 256-byte aligned
  // One arena for what Allocate will be asked for (sized at setup, so the buffers neither
  // fragment the device memory nor cost a cudaMalloc each). A no-op on the CPU.
  virtual Status ReserveArena(size_t bytes) { return Status::Ok(); }
  // Bytes Allocate hands out for `bytes` (its alignment), for sizing the arena.
  static size_t AllocationSize(size_t bytes) { return (bytes + 255) / 256 * 256; }
  virtual void Free(void* ptr) = 0;
  // The high-water mark of the bytes Allocate has handed out (0 where not tracked: the GPU).
  virtual size_t PeakAllocatedBytes() const { return 0; }
  virtual Status CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual Status CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  virtual Status CopyDeviceToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual Status Zero(Tensor t) = 0;
  // dst = src converted between f32 and bf16 (or a plain copy when equal); the same number of
  // elements.
  Status Convert(Tensor dst, Tensor src);
  virtual Status Synchronize() = 0;

  // ---- host staging and copies in stream order (the offloaded optimizer's ring) ----
  // Host memory that the device copies to and from at full speed: page-locked on a GPU
  // (cudaHostAlloc), zero-filled; by default Allocate (a host backend's memory is the host's).
  virtual Status AllocateHost(size_t bytes, void** out) { return Allocate(bytes, out); }
  virtual void FreeHost(void* ptr) { Free(ptr); }
  // Copies queued in the backend's stream order (after the ops queued before them) that may
  // return before they finish: the host must leave host_dst / host_src alone until WaitForCopies
  // of a mark recorded after them returns. By default the synchronous copies.
  virtual Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes) {
    return CopyToHost(host_dst, src, bytes);
  }
  virtual Status CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) {
    return CopyToDevice(dst, host_src, bytes);
  }
  // RecordCopies(i) sets copy mark i (0 <= i < kMaxCopyMarks) at this point of the stream order;
  // WaitForCopies(i) returns once the stream has passed it (everything queued before it is done).
  static constexpr int kMaxCopyMarks = 4;
  virtual Status RecordCopies(int mark) { return Status::Ok(); }
  virtual Status WaitForCopies(int mark) { return Status::Ok(); }

  // ---- timing (Engine.profile) ----
  // Mark(i) records timing mark i (0 <= i < kMaxMarks) in the backend's stream order (a CUDA
  // event on the GPU, the host clock on the CPU); SecondsBetween(i, j) waits for mark j and
  // returns the time from mark i to mark j.
  static constexpr int kMaxMarks = 64;
  virtual Status Mark(int index) = 0;
  virtual Status SecondsBetween(int from, int to, double* seconds) = 0;
  // The profiled steps' bounds for an outside profiler (cudaProfilerStart/Stop on the GPU, so that
  // `ncu --profile-from-start off` or `nsys --capture-range=cudaProfilerApi` see only them).
  virtual Status ProfilerRange(bool start) { return Status::Ok(); }

  // ---- routes (route_table.h, Engine.gpu_routes) ----
  // The routes chosen so far, one entry per op and shape whose choice is made; nullptr where the
  // backend has no ops with candidates (the CPU's).
  virtual const RouteTable* routes() const { return nullptr; }
  // False while some shape's candidates are still being timed (over the first step's calls).
  virtual bool routes_settled() const { return true; }
  // Takes the pinned choices of a routes file for the shapes it names (before the first step): a
  // usage error naming the file, op, shape and candidate for a route that is not one of the
  // backend's. Backends without routes ignore them.
  virtual Status PinRoutes(const RouteTable& pins) { return Status::Ok(); }
  // Takes `table`'s timed choices (rank 0's report, every rank's shapes) for the shapes this
  // backend timed otherwise, from their next call on, so that every rank routes a shape alike.
  virtual Status AdoptRoutes(const RouteTable& table) { return Status::Ok(); }

  // ---- layers ----
  // Each op's contract below is checked once for every backend (op_contracts.cpp) before the
  // backend's Run* hook runs: shapes, and dtypes (compute = compute_dtype(); statistics,
  // parameter gradients and losses f32). An error names the op, the tensors and their shapes.
  //
  // out (B,T,C) compute = wte[tokens - vocab_start] (zero when the token is outside this rank's
  // rows) + wpe[t] (when wpe is not empty).
  // tokens (B,T) i32; wte (Vlocal, C) compute; wpe (P >= T, C) compute or empty.
  Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int vocab_start);
  // dwte (Vlocal, C) f32 += ; dwpe (P >= T, C) f32 += (skipped when empty); dout (B,T,C) compute.
  Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int vocab_start);

  // out (N,C), mean (N) f32, rstd (N) f32 = LayerNorm(in (N,C); weight (C), bias (C)), eps 1e-5;
  // in, out, weight, bias compute.
  Status LayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight,
                          Tensor bias);
  // din (N,C) += (dout, din compute, like in); dweight, dbias (C) f32 += ; din_sums (C) f32 += the
  // column sums of din as it was on entry (skipped when empty). When din is the residual stream's
  // gradient, those are the bias gradient of the linear layer whose output joined the stream there:
  // summed here, where din is read anyway, instead of in a pass of their own.
  Status LayerNormBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor din_sums, Tensor dout,
                           Tensor in, Tensor weight, Tensor mean, Tensor rstd);

  // out (N,OC) = act(in (N,C) @ weight (OC,C)^T + bias (OC)); bias may be empty; all compute.
  // With kGelu, pre_act (N,OC) receives the value before GELU (needed by backward).
  Status MatmulForward(Tensor out, Tensor pre_act, Tensor in, Tensor weight, Tensor bias,
                       Activation act);
  // out (N,OC) = residual (N,OC) + in (N,C) @ weight (OC,C)^T + bias (OC): a linear layer whose
  // output joins the residual stream (the GPU adds the residual in the GEMM). out must not alias
  // in or residual.
  Status MatmulForwardAddResidual(Tensor out, Tensor in, Tensor weight, Tensor bias,
                                  Tensor residual);
  // din (N,C) = dout @ weight (overwritten; skipped when empty);
  // dweight (OC,C) f32 += (or =, by dweight_write) dout^T @ in (skipped when empty); dbias (OC)
  // f32 += column sums of dout (skipped when empty). dout, in, weight, din compute.
  Status MatmulBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                        Tensor weight, GradientWrite dweight_write);
  // Matrix products on blocks of columns of wider row-major matrices, in place (LoRA's adapters:
  // their block of a fused q/k/v or gate/up output and their block of the group's stacked x A^T,
  // and the frozen base linear added onto what the adapters wrote; lora.h). All compute but
  // dweight (f32).
  // out block (N,OC) = (or +=, by out_write) alpha in block (N,R) @ weight (OC,R)^T (+ bias
  // (OC)); rounded once on the GPU. out must not alias in.
  Status MatmulColumns(ColumnBlock out, GradientWrite out_write, ColumnBlock in, Tensor weight,
                       Tensor bias, float alpha = 1.f);
  // din block (N,C) = (or +=, by din_write) alpha dout block (N,OC) @ weight (OC,C) (skipped when
  // din.whole is empty); dweight (OC,C) += alpha dout block^T @ in block (skipped when empty).
  Status MatmulBackwardColumns(ColumnBlock din, GradientWrite din_write, Tensor dweight,
                               ColumnBlock dout, ColumnBlock in, Tensor weight, float alpha = 1.f);
  // The matrix products from here until SetRaggedGroups(false) run over row groups whose sizes
  // change from step to step (the MoE experts' groups): a backend that times its algorithms per
  // shape (CUDA's cuBLASLt routes) takes its heuristic's first choice for them instead, untimed,
  // the same on every rank. No effect on the CPU.
  virtual void SetRaggedGroups(bool on) { (void)on; }
  // out (W) f32 += over the rows r of in (N,C): [row_weights[r] *] in[r, first_column + j], j < W;
  // in compute; row_weights f32 (N) or empty. Without weights: a bias gradient from a block of
  // dout's columns; with them: a vector times a matrix.
  Status ColumnSums(Tensor out, Tensor in, int64_t first_column, Tensor row_weights);
  // out = GELU(in) (tanh approximation), for activation recomputation; out may alias in.
  Status GeluForward(Tensor out, Tensor in);
  // MatmulBackward where `in` is GELU(gelu_pre_act): din (N,C) = (dout @ weight) * GELU'(pre_act),
  // the gradient before the GELU (one pass on the GPU: cuBLASLt's DGELU epilogue or our kernel);
  // din_sums (C) f32 += the column sums of din, the bias gradient of the linear that made
  // gelu_pre_act (skipped when empty; on the GPU summed inside our kernel where it runs).
  // din and gelu_pre_act (N,C) compute, not empty; the rest as MatmulBackward.
  Status MatmulBackwardThroughGelu(Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                                   Tensor weight, Tensor gelu_pre_act, Tensor din_sums,
                                   GradientWrite dweight_write);
  // dx (N,D) = dy * GELU'(pre_act) (tanh approximation); dx may alias dy.
  Status GeluBackward(Tensor dx, Tensor dy, Tensor pre_act);

  // Causal self-attention, scale 1/sqrt(HS), over qkv (B,T,(NH+2*NKV)*HS) laid out
  // [NH q heads | NKV k heads | NKV v heads]; q head h attends with kv head h / (NH/NKV)
  // (grouped-query attention; num_kv_heads 0 means NKV = NH, plain multi-head attention).
  // qkv, out (B,T,NH*HS) compute; stats (B,NH,T) f32 = per-row logsumexp of the scaled scores.
  // With dropout.on(), the probabilities are dropped (philox.h, kind kDropoutAttnProbs: row b of
  // qkv is sample dropout.first_sample + b, query t and key s are position t and column s, local
  // head h is head dropout.first_head + h) after the statistics are taken; the backward drops the
  // same. The GPU's fused attention draws its own mask (gpu.md).
  // With doc_starts (B,T) i32 (Data.packing: documents; empty: plain causal), query t of sample
  // b attends to keys s with doc_starts[b][t] <= s <= t only: doc_starts[b][t] is the position
  // where t's document starts in the window (0 <= doc_starts[b][t] <= t, the same for every
  // token of a document; the caller keeps to that). documents: their count and longest length
  // as the host measured them (MeasureDocuments), or unknown; the GPU's fused attention for
  // documents needs them (unknown: its slower kernels run).
  Status AttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                          int num_kv_heads = 0, const DropoutKey& dropout = DropoutKey(),
                          Tensor doc_starts = Tensor(), DocumentShape documents = DocumentShape());
  // dqkv like qkv, overwritten (a kv head's gradient sums over its query heads); dout like out.
  Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor stats,
                           int num_heads, int num_kv_heads = 0,
                           const DropoutKey& dropout = DropoutKey(), Tensor doc_starts = Tensor(),
                           DocumentShape documents = DocumentShape());

  // Dropout (philox.h): out (N,C) = [residual +] in * keep / (1 - p), keep drawn for row r (the
  // global row key.first_row + r: sample key.first_sample + row / key.seq_len, position
  // row % key.seq_len) and column c. in, out, residual (empty or like in) compute; out may alias
  // in or residual. key.on(). The backward is the same op on the gradient (without residual).
  Status Dropout(Tensor out, Tensor in, Tensor residual, const DropoutKey& key);

  // residual (N,C) = a + b, then out, mean, rstd = LayerNorm(residual) (one pass on the GPU).
  // residual may alias a. a, b, residual alike; the rest as LayerNormForward.
  Status AddLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                             Tensor b, Tensor weight, Tensor bias);

  // out = a + b (all the same shape and dtype: f32 or compute); out may alias a or b.
  Status Add(Tensor out, Tensor a, Tensor b);
  // out += a.
  Status AddInPlace(Tensor out, Tensor a);

  // ---- vocabulary-parallel cross-entropy, in three passes with all-reduces between ----
  // logits (N,Vlocal) hold this rank's columns [vocab_start, vocab_start + Vlocal); only global
  // columns < vocab_size are real (the rest are padding, masked out).
  // logits compute; vocab_start >= 0, vocab_size > 0.
  // row_max (N) f32 = max over this rank's real columns (-inf when it has none).
  Status CrossEntropyRowMax(Tensor row_max, Tensor logits, int vocab_start, int vocab_size);
  // After row_max is reduced (max) over the group:
  // sums (2,N) f32: row 0 = sum of exp(logit - row_max) over real columns, row 1 = the target's
  // logit when the target is one of this rank's columns, else 0. targets (N) i32; a target < 0
  // is ignored (loss mask 0): its loss is 0 and its dlogits row 0.
  Status CrossEntropySums(Tensor sums, Tensor logits, Tensor row_max, Tensor targets,
                          int vocab_start, int vocab_size);
  // After sums is reduced (sum) over the group:
  // losses (N) f32 = log(sumexp) + row_max - target_logit;
  // dlogits (N,Vlocal) = dloss_scale * (softmax - onehot(target)), zero on padding columns.
  // dlogits compute, like logits, may alias logits. Skipped (losses only) when dlogits is empty.
  Status CrossEntropyBackward(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                              Tensor sums, Tensor targets, int vocab_start, int vocab_size,
                              float dloss_scale);

  // All of the above at once for a rank that holds the whole vocabulary (vocab_start 0, no TP):
  // losses, and dlogits when not empty. row_max (N) and sums (2,N) are scratch. The default runs
  // the three passes; the GPU does it in one pass over the logits where a row fits on chip.
  Status CrossEntropyFused(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                           Tensor sums, Tensor targets, int vocab_size, float dloss_scale);

  // ---- Llama-family layers ----
  // Each op's contract is checked once, here (backend.cpp), before the backend's Run* hook runs:
  // shapes, and dtypes (compute = compute_dtype(); statistics and parameter gradients f32).
  //
  // RMSNorm: out (N,C) compute, rstd (N) f32 = 1 / sqrt(mean(in^2) + eps), out = in * rstd *
  // weight (C), the statistics in f32 (Hugging Face's LlamaRMSNorm).
  Status RmsNormForward(Tensor out, Tensor rstd, Tensor in, Tensor weight, float eps);
  // din (N,C) += (as LayerNormBackward: din is the residual stream's gradient); dweight (C) f32 +=.
  Status RmsNormBackward(Tensor din, Tensor dweight, Tensor dout, Tensor in, Tensor weight,
                         Tensor rstd);
  // residual (N,C) = a + b, then out, rstd = RmsNorm(residual) (one pass on the GPU). residual
  // may alias a.
  Status AddRmsNormForward(Tensor residual, Tensor out, Tensor rstd, Tensor a, Tensor b,
                           Tensor weight, float eps);
  // Qwen3's q_norm / k_norm: RMSNorm of each q head and each k head (HD values) of
  // in (B,T,(NH+2*NKV)*HD) with q_weight (HD) or k_weight (HD); the v heads copied unchanged.
  // out like in (must not alias it); rstd (B*T, NH+NKV) f32, q heads first.
  Status QkNormForward(Tensor out, Tensor rstd, Tensor in, Tensor q_weight, Tensor k_weight,
                       int num_heads, int num_kv_heads, float eps);
  // din like in, overwritten (its v heads = dout's; din may alias dout); dq_weight,
  // dk_weight (HD) f32 +=.
  Status QkNormBackward(Tensor din, Tensor dq_weight, Tensor dk_weight, Tensor dout, Tensor in,
                        Tensor q_weight, Tensor k_weight, Tensor rstd, int num_heads,
                        int num_kv_heads);
  // Rotary position embedding in Hugging Face's rotate-half layout, in place on the q and k heads
  // of qkv (B,T,(NH+2*NKV)*HD): for position t and i < HD/2, with c = cos_sin[0][t][i] and
  // s = cos_sin[1][t][i], (x_i, x_{i+HD/2}) <- (x_i c - x_{i+HD/2} s, x_{i+HD/2} c + x_i s).
  // cos_sin (2, P, HD/2) f32 with P >= T positions (MakeRopeTable). v heads untouched.
  // With doc_starts (B,T) i32 (as AttentionForward's; empty: position t), token t of sample b
  // is at position t - doc_starts[b][t]: positions restart at 0 where each document starts.
  Status RopeForward(Tensor qkv, Tensor cos_sin, int num_heads, int num_kv_heads,
                     Tensor doc_starts = Tensor());
  // The transposed rotation (by -angle), in place on the gradient dqkv (same layout).
  Status RopeBackward(Tensor dqkv, Tensor cos_sin, int num_heads, int num_kv_heads,
                      Tensor doc_starts = Tensor());
  // SwiGLU: out (N,F) = silu(gate_up[:, :F]) * gate_up[:, F:], gate_up (N,2F) = [gate | up]
  // (the column-parallel gate and up projections of this rank, side by side).
  Status SwiGluForward(Tensor out, Tensor gate_up);
  // dgate_up (N,2F) overwritten = [dout * up * silu'(gate) | dout * silu(gate)]; may not alias.
  // With act (N,F) given, also act = the forward's out, to the bit (for a caller that makes the
  // forward's output again where it needs it, in the same pass over gate_up).
  Status SwiGluBackward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act = Tensor());

  // ---- mixture of experts (moe_layer.h; contracts in moe_contracts.cpp) ----
  // E experts, K = r.top_k per token, K' = K (+1 with r.shared_gate), E' = E (+1 likewise).
  // Router: logits (N,E') f32 -> probs (N,E) f32, the scores (softmax over the E experts, or
  // sigmoid); experts (N,K) i32, the K chosen, in ascending order (the top K by probs, or by the
  // logits with !pre_softmax; equal scores: the lower expert index first); weights (N,K') f32
  // their weights (and the shared expert's gate, sigmoid(logits[:, E])); lse (N) f32 the
  // logsumexp of the E logits (for the z-loss). bias (E) f32 or compute, when not empty, is added
  // to what the choice compares (scores, or logits) and to nothing else (DeepSeek-V3's expert
  // bias; on the GPU its bf16 parameter copy, widened to f32).
  Status MoeRouterForward(Tensor weights, Tensor experts, Tensor probs, Tensor lse, Tensor logits,
                          Tensor bias, const MoeRouting& r);
  // dlogits (N,E') f32 = the gradient through the weights (dweights (N,K') f32), plus the
  // load-balancing loss's through probs: aux_coef (G,E) f32 (empty: none) is d(loss)/d(score) of
  // the G groups of N/G consecutive rows (with sigmoid scores, of the scores normalised to sum 1),
  // plus z_scale * d(lse^2)/d(logits) of each row.
  Status MoeRouterBackward(Tensor dlogits, Tensor dweights, Tensor logits, Tensor probs,
                           Tensor experts, Tensor weights, Tensor aux_coef, float z_scale,
                           const MoeRouting& r);
  // The router's losses from its choices experts (N,K) i32 and scores probs (N,E) f32, over G
  // groups of n = N/G consecutive rows (the micro-batch, or each sequence): the load-balancing
  // loss, the mean over the groups of c.aux * E / (K n^2) * sum_e P_e * count_e (P_e the group's
  // sum of its scores for e, sigmoid scores normalised to sum 1 per token; count_e its choices
  // of e), and the z-loss c.z / N * sum_t lse (N) f32 [t]^2. aux_coef (G,E) f32 (empty when
  // c.aux is 0) = c.loss_scale * d(aux loss)/d(P_e), what MoeRouterBackward takes; losses (2)
  // f64 = {aux loss, z-loss} (0 for a zero coefficient). Fixed-order sums: the same inputs give
  // the same bits.
  Status MoeRouterLosses(Tensor aux_coef, Tensor losses, Tensor experts, Tensor probs, Tensor lse,
                         const MoeLossCoefficients& c);
  // The dispatch of the router's choices experts (N,K) i32 (distinct per token) into the experts'
  // groups, on the device: counts (E) i32 = the choices of each expert; slots (N,K') i32 = the row
  // of x_perm of each choice: the stable counting sort by expert (a group's rows in token order,
  // the groups in expert order, each group its first `capacity` choices, 0: all), -1 for a choice
  // past the capacity or of no expert (outside [0, E)); K' = K + 1
  // adds the shared expert's rows, slots[t][K] = N*K + t. The same as PlanMoeDispatch
  // (moe_layer.h) on the host, which needs the choices copied back first.
  Status MoeDispatchSlots(Tensor slots, Tensor counts, Tensor experts, int64_t capacity);
  // out (M,C)[slots[t][k]] = [weights[t][k] *] in (N,C)[t] for every slots[t][k] >= 0 (slots
  // (N,K') i32 distinct, < M; weights (N,K') f32 or empty): the permutation of the tokens into
  // expert order, and the combine's backward. Rows no slot names are left as they are.
  Status MoeScatterRows(Tensor out, Tensor in, Tensor slots, Tensor weights);
  // out (N,C)[t] (= or +=, by accumulate) sum over k = 0..K'-1 with slots[t][k] >= 0, in that
  // order, of [weights[t][k] *] in (M,C)[slots[t][k]]: the weighted combine of the experts'
  // outputs (no atomics: a fixed order), and the permutation's backward.
  Status MoeGatherRows(Tensor out, Tensor in, Tensor slots, Tensor weights, bool accumulate);
  // dweights (N,K') f32 [t][k] = dout (N,C)[t] . in (M,C)[slots[t][k]] (0 where slots < 0).
  Status MoeSlotDots(Tensor dweights, Tensor dout, Tensor in, Tensor slots);
  // Grouped matrix products (the experts over their row groups; contracts in
  // grouped_contracts.cpp): for each group g of `groups` (host data; rows 0 skipped), with
  // R = rows [g.offset, g.offset + g.rows) and W = weights[g.expert]:
  //   out[R] (M,OC) = in[R] (M,C) @ W^T, weights (E,OC,C); rows of out in no group untouched.
  // Groups must not overlap; in, out, weights compute. One launch per call on the GPU
  // (cuBLAS's grouped GEMM), the per-group loop on the CPU.
  Status GroupedMatmulForward(Tensor out, Tensor in, Tensor weights,
                              const std::vector<ExpertRun>& groups);
  // The experts' [gate | up] product and their SwiGLU in one op: h (M,2F) as GroupedMatmulForward's
  // out (weights (E,2F,C): each expert's F gate rows, then its F up rows) and act[R] (M,F) =
  // SwiGluForward of h[R]; rows in no group of either untouched. One launch on our sm90 kernels
  // (the SwiGLU in the GEMM's epilogue); elsewhere the product, then SwiGLU over each run of
  // abutting groups.
  Status GroupedMatmulSwiGluForward(Tensor h, Tensor act, Tensor in, Tensor weights,
                                    const std::vector<ExpertRun>& groups);
  // din[R] (M,C) = dout[R] (M,OC) @ W (overwritten; skipped when empty); dweights (E,OC,C) f32:
  // dweights[g.expert] += dout[R]^T @ in[R] (skipped when empty), or with dweights_write
  // kOverwrite dweights[e] = the sum over expert e's groups, zero for an expert in no group (with
  // kAccumulate those stay untouched). dout, in, din compute. dweights_squares (one f64, optional,
  // with dweights): += the sum of the squares of all of dweights after the op (a gradient norm's
  // share; our sm90 kernels sum them as they write an overwritten dweights, else a pass over it).
  Status GroupedMatmulBackward(Tensor din, Tensor dweights, Tensor dout, Tensor in, Tensor weights,
                               const std::vector<ExpertRun>& groups, GradientWrite dweights_write,
                               Tensor dweights_squares = Tensor());
  // The experts' down product's backward with their SwiGLU's (h (M,2F) [gate | up] and act (M,F)
  // its SwiGLU, from GroupedMatmulSwiGluForward; weights (E,OC,F)): dact = GroupedMatmulBackward's
  // din of dout, and dh[R] (M,2F) = SwiGluBackward of dact[R] over h[R] (rows in no group of dh
  // untouched); dweights (and dweights_squares) as GroupedMatmulBackward's, of dout and act.
  // dact (M,F) is scratch: a backend that forms dh in the product's epilogue need not write it.
  // With SwiGluAct::kRemake act is an output: the op makes it from h (rows in groups) with dh,
  // before the weight gradient reads it, as GroupedMatmulSwiGluForward made it.
  Status GroupedMatmulSwiGluBackward(Tensor dh, Tensor dweights, Tensor dact, Tensor dout,
                                     Tensor act, Tensor h, Tensor weights,
                                     const std::vector<ExpertRun>& groups,
                                     GradientWrite dweights_write,
                                     Tensor dweights_squares = Tensor(),
                                     SwiGluAct act_source = SwiGluAct::kRead);

  // ---- optimizer ----
  // One AdamW step over contiguous f32 spans (master, grad, m, v: n > 0 elements); writes the
  // copy `param` (n elements, f32 or compute) from the updated master. p.step >= 1. With a u16
  // `master` and bf16 `param`, the master weights are those two halves (master_remainder.h):
  // read from both, and both written from the updated master.
  Status AdamW(Tensor param, Tensor master, Tensor grad, Tensor m, Tensor v, const AdamWParams& p);
  // master (f32) = the weights that param (bf16) and remainder (u16) hold as two halves
  // (JoinMaster), and the split back (MasterHigh, MasterRemainder); n elements each.
  Status JoinMasterHalves(Tensor master, Tensor param, Tensor remainder);
  Status SplitMasterHalves(Tensor param, Tensor remainder, Tensor master);
  // total (one f64 element, in backend memory) = [total +] sum of the f32 span x (of its squares),
  // without waiting for the device: the step's losses and gradient norm stay there. x may be
  // empty (adds 0).
  Status SumInto(Tensor total, Tensor x, SumOf what, bool accumulate);
  // x *= s (f32 or bf16); nothing when x is empty.
  Status Scale(Tensor x, float s);

 protected:
  // The ops after their contract checks (arguments as documented above): each backend runs
  // them, checking only what its own kernels add (a device limit, stated as such).
  virtual Status RunConvert(Tensor dst, Tensor src) = 0;
  virtual Status RunEmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                                     int vocab_start) = 0;
  virtual Status RunEmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                      int vocab_start) = 0;
  virtual Status RunLayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight,
                                     Tensor bias) = 0;
  virtual Status RunLayerNormBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor din_sums,
                                      Tensor dout, Tensor in, Tensor weight, Tensor mean,
                                      Tensor rstd) = 0;
  // Default: RunAdd, then RunLayerNormForward.
  virtual Status RunAddLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd,
                                        Tensor a, Tensor b, Tensor weight, Tensor bias);
  virtual Status RunMatmulForward(Tensor out, Tensor pre_act, Tensor in, Tensor weight, Tensor bias,
                                  Activation act) = 0;
  // Default: RunMatmulForward, then RunAdd.
  virtual Status RunMatmulForwardAddResidual(Tensor out, Tensor in, Tensor weight, Tensor bias,
                                             Tensor residual);
  virtual Status RunMatmulBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor dout, Tensor in,
                                   Tensor weight, GradientWrite dweight_write) = 0;
  // Default: RunMatmulBackward, RunGeluBackward in place on din, then RunColumnSums of din.
  virtual Status RunMatmulBackwardThroughGelu(Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                                              Tensor in, Tensor weight, Tensor gelu_pre_act,
                                              Tensor din_sums, GradientWrite dweight_write);
  virtual Status RunColumnSums(Tensor out, Tensor in, int64_t first_column, Tensor row_weights) = 0;
  virtual Status RunMatmulColumns(ColumnBlock out, GradientWrite out_write, ColumnBlock in,
                                  Tensor weight, Tensor bias, float alpha) = 0;
  virtual Status RunMatmulBackwardColumns(ColumnBlock din, GradientWrite din_write,
                                          Tensor dweight, ColumnBlock dout, ColumnBlock in,
                                          Tensor weight, float alpha) = 0;
  virtual Status RunGeluForward(Tensor out, Tensor in) = 0;
  virtual Status RunGeluBackward(Tensor dx, Tensor dy, Tensor pre_act) = 0;
  // num_kv_heads is resolved here: NKV > 0 (num_heads where the caller passed 0).
  virtual Status RunAttentionForward(Tensor out, Tensor stats, Tensor qkv, int num_heads,
                                     int num_kv_heads, const DropoutKey& dropout,
                                     Tensor doc_starts, const DocumentShape& documents) = 0;
  virtual Status RunAttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                      Tensor stats, int num_heads, int num_kv_heads,
                                      const DropoutKey& dropout, Tensor doc_starts,
                                      const DocumentShape& documents) = 0;
  virtual Status RunDropout(Tensor out, Tensor in, Tensor residual, const DropoutKey& key) = 0;
  virtual Status RunAdd(Tensor out, Tensor a, Tensor b) = 0;
  virtual Status RunAddInPlace(Tensor out, Tensor a) = 0;
  virtual Status RunCrossEntropyRowMax(Tensor row_max, Tensor logits, int vocab_start,
                                       int vocab_size) = 0;
  virtual Status RunCrossEntropySums(Tensor sums, Tensor logits, Tensor row_max, Tensor targets,
                                     int vocab_start, int vocab_size) = 0;
  virtual Status RunCrossEntropyBackward(Tensor losses, Tensor dlogits, Tensor logits,
                                         Tensor row_max, Tensor sums, Tensor targets,
                                         int vocab_start, int vocab_size, float dloss_scale) = 0;
  // Default: the three passes (RunCrossEntropyRowMax, RunCrossEntropySums,
  // RunCrossEntropyBackward) with vocab_start 0.
  virtual Status RunCrossEntropyFused(Tensor losses, Tensor dlogits, Tensor logits, Tensor row_max,
                                      Tensor sums, Tensor targets, int vocab_size,
                                      float dloss_scale);
  virtual Status RunAdamW(Tensor param, Tensor master, Tensor grad, Tensor m, Tensor v,
                          const AdamWParams& p) = 0;
  // join: master from param and remainder; else the reverse.
  virtual Status RunMasterHalves(Tensor master, Tensor param, Tensor remainder, bool join) = 0;
  // x is empty, or a non-empty f32 span.
  virtual Status RunSumInto(Tensor total, Tensor x, SumOf what, bool accumulate) = 0;
  virtual Status RunScale(Tensor x, float s) = 0;

  virtual Status RunRmsNormForward(Tensor out, Tensor rstd, Tensor in, Tensor weight,
                                   float eps) = 0;
  virtual Status RunRmsNormBackward(Tensor din, Tensor dweight, Tensor dout, Tensor in,
                                    Tensor weight, Tensor rstd) = 0;
  // Default: Add, then RunRmsNormForward.
  virtual Status RunAddRmsNormForward(Tensor residual, Tensor out, Tensor rstd, Tensor a, Tensor b,
                                      Tensor weight, float eps);
  virtual Status RunQkNormForward(Tensor out, Tensor rstd, Tensor in, Tensor q_weight,
                                  Tensor k_weight, int num_heads, int num_kv_heads, float eps) = 0;
  virtual Status RunQkNormBackward(Tensor din, Tensor dq_weight, Tensor dk_weight, Tensor dout,
                                   Tensor in, Tensor q_weight, Tensor k_weight, Tensor rstd,
                                   int num_heads, int num_kv_heads) = 0;
  // inverse: false forward rotation, true the backward (transposed) one.
  virtual Status RunRope(Tensor qkv, Tensor cos_sin, int num_heads, int num_kv_heads,
                         bool inverse, Tensor doc_starts) = 0;
  virtual Status RunSwiGluForward(Tensor out, Tensor gate_up) = 0;
  // act: empty, or also the forward's output (SwiGluBackward).
  virtual Status RunSwiGluBackward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) = 0;
  // Mixture of experts. Default: an error ("this backend has no mixture-of-experts kernels").
  virtual Status RunMoeRouterForward(Tensor weights, Tensor experts, Tensor probs, Tensor lse,
                                     Tensor logits, Tensor bias, const MoeRouting& r);
  virtual Status RunMoeRouterBackward(Tensor dlogits, Tensor dweights, Tensor logits, Tensor probs,
                                      Tensor experts, Tensor weights, Tensor aux_coef,
                                      float z_scale, const MoeRouting& r);
  virtual Status RunMoeRouterLosses(Tensor aux_coef, Tensor losses, Tensor experts, Tensor probs,
                                    Tensor lse, const MoeLossCoefficients& c);
  virtual Status RunMoeDispatchSlots(Tensor slots, Tensor counts, Tensor experts,
                                     int64_t capacity);
  virtual Status RunMoeScatterRows(Tensor out, Tensor in, Tensor slots, Tensor weights);
  virtual Status RunMoeGatherRows(Tensor out, Tensor in, Tensor slots, Tensor weights,
                                  bool accumulate);
  virtual Status RunMoeSlotDots(Tensor dweights, Tensor dout, Tensor in, Tensor slots);
  // Grouped matrix products. Default (the CPU twin, and the GPU's fallback): one
  // RunMatmulForward / RunMatmulBackward per group, under SetRaggedGroups(true).
  virtual Status RunGroupedMatmulForward(Tensor out, Tensor in, Tensor weights,
                                         const std::vector<ExpertRun>& groups);
  virtual Status RunGroupedMatmulBackward(Tensor din, Tensor dweights, Tensor dout, Tensor in,
                                          Tensor weights, const std::vector<ExpertRun>& groups,
                                          GradientWrite dweights_write, Tensor dweights_squares);
  virtual Status RunGroupedMatmulSwiGluForward(Tensor h, Tensor act, Tensor in, Tensor weights,
                                               const std::vector<ExpertRun>& groups);
  virtual Status RunGroupedMatmulSwiGluBackward(Tensor dh, Tensor dweights, Tensor dact,
                                                Tensor dout, Tensor act, Tensor h, Tensor weights,
                                                const std::vector<ExpertRun>& groups,
                                                GradientWrite dweights_write,
                                                Tensor dweights_squares, SwiGluAct act_source);
};

std::unique_ptr<Backend> MakeCpuBackend();
// nullptr with an error status when CUDA is not compiled in or no GPU is visible. `compute` is
// the dtype of parameters and activations: kBF16 (Engine.mix_precision=bf16) or kF32.
Status MakeCudaBackend(int device, std::unique_ptr<Backend>* out, DType compute = DType::kBF16);
// True when this binary was built with the CUDA backend.
bool CudaBackendCompiled();
// The backend's CUDA stream (cudaStream_t) for NCCL, or nullptr on the CPU backend.
void* BackendStream(Backend* backend);
// Memory this process uses on the backend's device, in bytes: the GPU's used memory
// (cudaMemGetInfo), or the peak resident set size on the CPU path.
double DeviceMemoryUsed(Backend* backend);
// Free and total memory of the backend's GPU (cudaMemGetInfo); false on the CPU path.
bool DeviceMemoryInfo(Backend* backend, double* free_bytes, double* total_bytes);
// The PCI bus id ("0000:19:00.0") of the GPU a CUDA backend runs on; "" for any other backend.
std::string BackendPciBusId(Backend* backend);
// CUDA devices this process can see (0 without CUDA, a driver or a GPU); where the CUDA runtime
// fails to count them, *why (when given) says how ("cudaErrorInsufficientDriver: ...").
int VisibleCudaDevices(std::string* why = nullptr);
// The name of visible CUDA device `device` ("NVIDIA H200"), "" where there is none.
std::string CudaDeviceName(int device);
// The dense bf16 peak (TFLOP/s, NVIDIA's datasheets without sparsity) of the GPU named
// `device_name` (cudaDeviceProp::name): Hopper SXM 989, PCIe 756, NVL 835, A100/A800 312; 0
// where unknown.
double DenseBf16PeakTflops(const std::string& device_name);
// Whether `peak_tflops` (Engine.peak_tflops, the MFU denominator) can be the dense bf16 peak of
// the GPU named `device_name`: false only for the default 989 (H100, H200 and H800 SXM) on a GPU
// that is none of those (PCIe and NVL cards included), whose MFU would then be off.
bool PeakFitsDevice(const std::string& device_name, double peak_tflops);

}  // namespace trainer
