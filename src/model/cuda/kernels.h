// Launchers of the CUDA backend's custom kernels (the middle tier): each picks a grid for raw
// device pointers, enqueues on `stream` and returns cudaGetLastError(). Compute tensors are f32 or
// bf16 as `dtype` says; statistics, parameter gradients, master weights and moments are f32.
// Shapes follow src/model/backend.h; shape checks are the ops' contracts (op_contracts.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "common/tensor.h"
#include "model/philox.h"

namespace trainer {
namespace cuda {

// ---- embedding.cu ----
// out (N,C) = wte[tokens[n] - vocab_start] (zero outside [0, vocab_local)) + wpe[n % T] (if any).
cudaError_t LaunchEmbeddingForward(DType dtype, void* out, const int32_t* tokens, const void* wte,
                                   const void* wpe, int64_t N, int T, int C, int vocab_start,
                                   int vocab_local, cudaStream_t stream);
// dwte (vocab_local,C) += dout rows by token; dwpe (T.., C) += dout summed over the batch.
// dwpe may be null. dwte accumulates with atomics (order of additions is not fixed).
cudaError_t LaunchEmbeddingBackward(DType dtype, float* dwte, float* dwpe, const void* dout,
                                    const int32_t* tokens, int B, int T, int C, int vocab_start,
                                    int vocab_local, cudaStream_t stream);

// ---- layernorm.cu ----
// With b == nullptr: out, mean, rstd = LayerNorm(a). Otherwise residual = a + b (rounded to dtype),
// then LayerNorm(residual); residual may alias a or b.
cudaError_t LaunchLayerNormForward(DType dtype, void* out, float* mean, float* rstd, void* residual,
                                   const void* a, const void* b, const void* weight,
                                   const void* bias, int64_t N, int C, cudaStream_t stream);
// Floats of scratch that LaunchLayerNormBackward needs for (N, C): its partial sums of the
// weight/bias gradients (and of din's column sums), at most (ceil(N / 32), 3, C), plus the
// generic path's column-sum partials.
size_t LayerNormBackwardScratchFloats(int64_t N, int C);
// din (N,C) += ; dweight, dbias (C) += (f32); din_sums (C) f32 += the column sums of din as it was
// on entry (skipped when null): the bias gradient of the linear layer that wrote that residual
// gradient, read here anyway. All summed in an order that depends only on (N, C)
// (deterministic). din must not alias dout or in. scratch: LayerNormBackwardScratchFloats(N, C).
cudaError_t LaunchLayerNormBackward(DType dtype, void* din, float* dweight, float* dbias,
                                    float* din_sums, const void* dout, const void* in,
                                    const void* weight, const float* mean, const float* rstd,
                                    int64_t N, int C, float* scratch, cudaStream_t stream);

// ---- rmsnorm.cu (Llama family; f32 statistics) ----
// With b == nullptr: out, rstd = RMSNorm(a) * weight, rstd = 1 / sqrt(mean(a^2) + eps). Otherwise
// residual = a + b (rounded to dtype), then RMSNorm(residual); residual may alias a or b.
cudaError_t LaunchRmsNormForward(DType dtype, void* out, float* rstd, void* residual, const void* a,
                                 const void* b, const void* weight, int64_t N, int C, float eps,
                                 cudaStream_t stream);
// Floats of scratch that LaunchRmsNormBackward needs for (N, C): its partial rows of dweight.
size_t RmsNormBackwardScratchFloats(DType dtype, int64_t N, int C);
// din (N,C) += ; dweight (C) f32 += , summed in an order that depends only on (N, C)
// (deterministic). din may alias dout or in (a thread reads each of its elements before writing
// it). scratch: RmsNormBackwardScratchFloats(dtype, N, C). Rows up to 40960 columns.
cudaError_t LaunchRmsNormBackward(DType dtype, void* din, float* dweight, const void* dout,
                                  const void* in, const void* weight, const float* rstd, int64_t N,
                                  int C, float* scratch, cudaStream_t stream);

// ---- qk_norm.cu (Qwen3's per-head RMSNorm of the q and k heads of qkv (N,(NH+2*NKV)*HD)) ----
// Head sizes up to kMaxQkNormHeadSize.
constexpr int kMaxQkNormHeadSize = 256;
// out like in (v heads copied); rstd (N, NH+NKV) f32, q heads first.
cudaError_t LaunchQkNormForward(DType dtype, void* out, float* rstd, const void* in,
                                const void* q_weight, const void* k_weight, int64_t N, int NH,
                                int NKV, int HD, float eps, cudaStream_t stream);
// Floats of scratch that LaunchQkNormBackward needs.
size_t QkNormBackwardScratchFloats(int64_t N, int HD);
// din overwritten (v heads = dout's; din may alias dout); dq_weight, dk_weight (HD) f32 +=, in an
// order that depends only on (N, NH, NKV, HD) (deterministic).
cudaError_t LaunchQkNormBackward(DType dtype, void* din, float* dq_weight, float* dk_weight,
                                 const void* dout, const void* in, const void* q_weight,
                                 const void* k_weight, const float* rstd, int64_t N, int NH,
                                 int NKV, int HD, float* scratch, cudaStream_t stream);

// ---- rope.cu (rotate-half rotary embedding, in place on the q and k heads) ----
// qkv (B*T, (NH+2*NKV)*HD); cos_sin (2, P, HD/2) f32; row r is position r % T, or
// r % T - doc_starts[r] with doc_starts (B*T) (Data.packing: documents). inverse: rotate by
// -angle (the backward pass).
cudaError_t LaunchRope(DType dtype, void* qkv, const float* cos_sin, int64_t N, int T, int NH,
                       int NKV, int HD, int P, bool inverse, cudaStream_t stream,
                       const int32_t* doc_starts = nullptr);

// ---- swiglu.cu ----
// out (N,F) = silu(gate_up[:, :F]) * gate_up[:, F:]; gate_up (N,2F).
cudaError_t LaunchSwiGluForward(DType dtype, void* out, const void* gate_up, int64_t N, int F,
                                cudaStream_t stream);
// dgate_up (N,2F) = [dout * up * silu'(gate) | dout * silu(gate)]; out (N,F), unless null,
// also the forward's output (LaunchSwiGluForward's, to the bit); no aliasing.
cudaError_t LaunchSwiGluBackward(DType dtype, void* dgate_up, const void* dout, const void* gate_up,
                                 int64_t N, int F, void* out, cudaStream_t stream);

// ---- moe.cu (mixture of experts; the twins of cpu/moe.cpp, shapes as Backend's Moe* ops) ----
// E experts, K chosen per token; K2 = K (+1 with the shared expert's gate), E2 = E (+1 likewise).
struct MoeRouterDims {
  int64_t N;
  int E, K;
  bool sigmoid, pre_softmax, norm_topk_prob, shared_gate;
};
// logits (N,E2) f32 -> weights (N,K2), experts (N,K) ascending, probs (N,E), lse (N); bias (E)
// or null, added to the choice's keys only.
cudaError_t LaunchMoeRouterForward(float* weights, int32_t* experts, float* probs, float* lse,
                                   const float* logits, const float* bias, const MoeRouterDims& d,
                                   cudaStream_t stream);
// dlogits (N,E2) overwritten from dweights (N,K2), aux_coef (groups,E) or null, z_scale.
cudaError_t LaunchMoeRouterBackward(float* dlogits, const float* dweights, const float* logits,
                                    const float* probs, const int32_t* experts,
                                    const float* weights, const float* aux_coef, int64_t groups,
                                    float z_scale, const MoeRouterDims& d, cudaStream_t stream);
// The router's losses over G groups of N/G rows (Backend::MoeRouterLosses): aux_coef (G,E), or
// null without the load-balancing loss, and losses (2) f64 = {aux loss, z-loss} from experts
// (N,K), probs (N,E), lse (N). workspace: MoeRouterLossesWorkspace bytes of device memory.
struct MoeLossDims {
  int64_t N, G;
  int E, K;
  bool sigmoid;
};
size_t MoeRouterLossesWorkspace(const MoeLossDims& d, bool aux);
cudaError_t LaunchMoeRouterLosses(float* aux_coef, double* losses, const int32_t* experts,
                                  const float* probs, const float* lse, const MoeLossDims& d,
                                  double aux, double z, float loss_scale, void* workspace,
                                  cudaStream_t stream);
// ---- moe_dispatch.cu: Backend::MoeDispatchSlots (experts (N,K) distinct per token -> slots
// (N,K2), counts (E)); workspace: MoeDispatchWorkspace bytes of device memory. Up to 1536
// experts (MoeDispatchSupported; cudaErrorNotSupported above).
size_t MoeDispatchWorkspace(int64_t N, int E);
bool MoeDispatchSupported(int E);
cudaError_t LaunchMoeDispatchSlots(int32_t* slots, int32_t* counts, const int32_t* experts,
                                   int64_t N, int K, int K2, int E, int64_t capacity,
                                   void* workspace, cudaStream_t stream);
// out[slots[t][k]] = [w[t][k] *] in[t] (C columns) for slots >= 0; w may be null.
cudaError_t LaunchMoeScatterRows(DType dtype, void* out, const void* in, const int32_t* slots,
                                 const float* w, int64_t N, int K2, int64_t C, cudaStream_t stream);
// out[t] (+)= sum over k ascending, slots >= 0, of [w[t][k] *] in[slots[t][k]]; f32 sum.
cudaError_t LaunchMoeGatherRows(DType dtype, void* out, const void* in, const int32_t* slots,
                                const float* w, int64_t N, int K2, int64_t C, bool accumulate,
                                cudaStream_t stream);
// dw (N,K2) f32 [t][k] = dout[t] . in[slots[t][k]] (0 where slots < 0).
cudaError_t LaunchMoeSlotDots(DType dtype, float* dw, const void* dout, const void* in,
                              const int32_t* slots, int64_t N, int K2, int64_t C,
                              cudaStream_t stream);

// ---- elementwise.cu ----
cudaError_t LaunchGeluForward(DType dtype, void* out, const void* in, int64_t n,
                              cudaStream_t stream);
// dx = dy * GELU'(pre_act); dx may alias dy.
cudaError_t LaunchGeluBackward(DType dtype, void* dx, const void* dy, const void* pre_act,
                               int64_t n, cudaStream_t stream);
// out = a + b; out may alias a or b.
cudaError_t LaunchAdd(DType dtype, void* out, const void* a, const void* b, int64_t n,
                      cudaStream_t stream);
cudaError_t LaunchScale(DType dtype, void* x, float s, int64_t n, cudaStream_t stream);
// ---- dropout.cu ----
// out (N,C) = [residual +] in * keep / (1 - p), keep the CPU's mask (cpu::dropout_forward);
// residual may be null; out may alias in or residual.
cudaError_t LaunchDropout(DType dtype, void* out, const void* in, const void* residual, int64_t N,
                          int C, const DropoutKey& key, cudaStream_t stream);
// dst[0] = a, dst[1] = b on the stream (cuDNN attention dropout's seed and offset).
cudaError_t LaunchFillInt64Pair(int64_t* dst, int64_t a, int64_t b, cudaStream_t stream);
// dst = src converted (f32 <-> bf16, or a copy).
cudaError_t LaunchConvert(DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n,
                          cudaStream_t stream);

// ---- reduce.cu ----
// Row chunks used by the two-stage column reductions for N rows.
int ColumnReductionChunks(int64_t N);
// partials (chunks, C) f32 = sums over each chunk of rows of x's first C columns (N rows, ld
// elements apart), each row times row_weights[row] (f32, N) when given.
cudaError_t LaunchColumnSumsPartial(DType dtype, float* partials, const void* x, int64_t N, int C,
                                    int64_t ld, const float* row_weights, int chunks,
                                    cudaStream_t stream);
// Partial rows (chunks, outs, count) into up to kMaxPartialOutputs f32 outputs of `count`
// columns: outs[i][c] += sum over r < chunks of partials[(r * outs + i) * count + c], in a fixed
// order (deterministic).
constexpr int kMaxPartialOutputs = 3;
cudaError_t LaunchAddPartials(std::initializer_list<float*> outs, const float* partials, int chunks,
                              int count, cudaStream_t stream);
// Doubles of scratch that LaunchSum needs.
constexpr int kSumSquaresPartials = 1024;
// *result (device double) = [*result +] sum of x[i] (of x[i]^2 with `squares`); partials:
// kSumSquaresPartials doubles.
cudaError_t LaunchSum(const float* x, int64_t n, bool squares, bool accumulate, double* partials,
                      double* result, cudaStream_t stream);
// *result (device double) = [*result +] the sum of the n doubles at `partials` (a kernel's partial
// sums), in a fixed order.
cudaError_t LaunchSumPartials(const double* partials, int64_t n, bool accumulate, double* result,
                              cudaStream_t stream);

// ---- attention_fallback.cu (our own causal attention, fp32 accumulation) ----
// qkv (B,T,NH+2*NKV,HS) = [NH q heads | NKV k heads | NKV v heads]; q head h attends with kv head
// h / (NH/NKV) (grouped-query attention; NKV = NH: multi-head). out (B,T,NH,HS); stats (B,NH,T) =
// logsumexp of the scaled scores. With dropout.p > 0, the probabilities dropped as the CPU's
// (Backend::AttentionForward), the backward the same. doc_starts (B,T) or null: query t of
// sample b sees keys doc_starts[b*T+t] <= s <= t only (Data.packing: documents).
cudaError_t LaunchAttentionForwardFallback(DType dtype, void* out, float* stats, const void* qkv,
                                           int B, int T, int NH, int NKV, int HS,
                                           const DropoutKey& dropout, cudaStream_t stream,
                                           const int32_t* doc_starts = nullptr);
// Floats of scratch that LaunchAttentionBackwardFallback needs.
size_t AttentionBackwardFallbackScratchFloats(int B, int T, int NH);
// dqkv (B,T,NH+2*NKV,HS) overwritten; a kv head's gradient sums over its query heads in a fixed
// order (deterministic).
cudaError_t LaunchAttentionBackwardFallback(DType dtype, void* dqkv, const void* dout,
                                            const void* qkv, const void* out, const float* stats,
                                            float* scratch, int B, int T, int NH, int NKV, int HS,
                                            const DropoutKey& dropout, cudaStream_t stream,
                                            const int32_t* doc_starts = nullptr);

// ---- attention_documents.cu (Data.packing: documents for cuDNN's fused attention; CPU twins:
// cpu::document_sequences, cpu::transpose_attention_stats) ----
// seq_len (capacity) and first_row (capacity + 1) as cpu::document_sequences; offsets
// (3, capacity + 1), int64 where wide_offsets else int32: first_row times qkv_row, out_row and
// stats_row, the element offsets of each sequence in qkv, out and the (B*T,NH) statistics.
cudaError_t LaunchDocumentSequences(int32_t* seq_len, int32_t* first_row, void* offsets,
                                    bool wide_offsets, const int32_t* doc_starts, int B, int T,
                                    int capacity, int64_t qkv_row, int64_t out_row,
                                    int64_t stats_row, cudaStream_t stream);
// by_head (B,NH,T) -> by_row (B*T,NH) where to_rows, else back.
cudaError_t LaunchTransposeAttentionStats(float* by_row, float* by_head, int B, int T, int NH,
                                          bool to_rows, cudaStream_t stream);

// ---- cross_entropy.cu (block per row; see Backend::CrossEntropy* for the three passes) ----
// One pass for a rank that holds the whole vocabulary, when a row fits in shared memory; false
// (nothing launched) otherwise. *error: the launch's result.
bool LaunchCrossEntropyFused(DType dtype, float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int64_t N, int vocab_local, int vocab_size,
                             float dloss_scale, cudaStream_t stream, cudaError_t* error);
cudaError_t LaunchCrossEntropyRowMax(DType dtype, float* row_max, const void* logits, int64_t N,
                                     int vocab_local, int vocab_start, int vocab_size,
                                     cudaStream_t stream);
cudaError_t LaunchCrossEntropySums(DType dtype, float* sums, const void* logits,
                                   const float* row_max, const int32_t* targets, int64_t N,
                                   int vocab_local, int vocab_start, int vocab_size,
                                   cudaStream_t stream);
// dlogits may be null (losses only) or alias logits.
cudaError_t LaunchCrossEntropyBackward(DType dtype, float* losses, void* dlogits,
                                       const void* logits, const float* row_max, const float* sums,
                                       const int32_t* targets, int64_t N, int vocab_local,
                                       int vocab_start, int vocab_size, float dloss_scale,
                                       cudaStream_t stream);

// ---- adamw.cu ----
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias_correction1, bias_correction2;  // 1 - beta^step
  const double* grad_sum_squares;            // when set, grad_scale comes from it (AdamWParams)
  double max_grad_norm;
};
// One launch over n elements: updates master, m, v and writes param (dtype) from the new master.
cudaError_t LaunchAdamW(DType dtype, void* param, float* master, const float* grad, float* m,
                        float* v, int64_t n, const AdamWStep& step, cudaStream_t stream);
// The same with the master weights as two halves (master_remainder.h): the bf16 parameters and
// their remainders, both read and written.
cudaError_t LaunchAdamWHalves(uint16_t* param, uint16_t* remainder, const float* grad, float* m,
                              float* v, int64_t n, const AdamWStep& step, cudaStream_t stream);
// join: master = JoinMaster(param, remainder); else param, remainder = the halves of master.
cudaError_t LaunchMasterHalves(float* master, uint16_t* param, uint16_t* remainder, int64_t n,
                               bool join, cudaStream_t stream);

}  // namespace cuda
}  // namespace trainer
