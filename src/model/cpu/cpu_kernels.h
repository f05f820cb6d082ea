// The CPU fp32 kernels: plain loops over raw pointers (no shapes, no Status), parallelised with
// OpenMP static schedules. They are the CPU twins of the CUDA kernels and the reference that GPU
// tests compare against. Every output element is computed by one fixed sequence of operations, so
// results are bit-identical from call to call and do not depend on the number of threads.
// Sizes: N = B*T rows, C = channels, OC = output channels, V = this rank's vocabulary columns.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/philox.h"

namespace trainer {
namespace cpu {

// ---- elementwise (cpu_backend.cpp) ----
void add(float* out, const float* a, const float* b, size_t n);  // out may alias a or b
void add_inplace(float* out, const float* a, size_t n);
void scale(float* x, float s, size_t n);

// ---- dropout.cpp (masks: philox.h) ----
// out (N,C) = [residual +] dropout(in) (residual may be null; out may alias in or residual).
void dropout_forward(float* out, const float* in, const float* residual, int64_t N, int C,
                     const DropoutKey& key);
// x[0, len) *= keep / (1 - p): one row of attention probabilities of query `position`, keys
// 0..len-1 as columns, of global head `head` of `sample`.
void dropout_row(float* x, int len, const DropoutKey& key, int64_t sample, int64_t position,
                 int head);

// ---- embedding.cpp ----
// out (B,T,C) = wte[tokens - vocab_start] (zero row when outside [0, V)) + wpe[t] (wpe may be
// null). tokens (B,T); wte (V,C); wpe (>= T, C).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, int vocab_start, int V);
// dwte (V,C) += ; dwpe (>= T, C) += (skipped when null); dout (B,T,C).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int vocab_start, int V);

// ---- layernorm.cpp ----
constexpr float kLayerNormEps = 1e-5f;
// out (N,C), mean (N), rstd (N) = LayerNorm(in (N,C)) * weight (C) + bias (C).
void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                       const float* bias, int64_t N, int C);
// din (N,C) += ; dweight (C) += ; dbias (C) += .
void layernorm_backward(float* din, float* dweight, float* dbias, const float* dout,
                        const float* in, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int C);

// ---- matmul.cpp ----
// sums (C) += the column sums of x (N,C) (a bias gradient).
void column_sums_accumulate(float* sums, const float* x, int64_t N, int C);
// sums (C) += over the N rows of x (ld apart) of [weights[n] *] x[n*ld + c]; weights may be null.
void column_sums_accumulate(float* sums, const float* x, int64_t N, int C, int64_t ld,
                            const float* weights);
// The general product under all matmuls: out (M,N) (row stride ldo) =
// (accumulate ? out : 0) + A (M,K) @ B (K,N), where A(i,k) = a[i*a_rs + k*a_cs] and
// B(k,j) = b[k*b_rs + j*b_cs]. Cache-blocked, packed, register-tiled; the sum over k always runs
// in increasing k from the initial out value. Parallel when called outside a parallel region,
// on the calling thread inside one.
void gemm(float* out, int64_t ldo, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
          int64_t b_rs, int64_t b_cs, int64_t M, int64_t N, int64_t K, bool accumulate);
// out (N,OC) = act(in (N,C) @ weight (OC,C)^T + bias (OC)); bias may be null. With gelu,
// pre_act (N,OC) receives the value before GELU (required then).
void matmul_forward(float* out, float* pre_act, const float* in, const float* weight,
                    const float* bias, int64_t N, int C, int OC, bool gelu);
// din (N,C) = dout (N,OC) @ weight (OC,C) (skipped when null); dweight (OC,C) += dout^T @ in;
// dbias (OC) += column sums of dout (skipped when null).
// din and dbias are skipped when null, dweight too.
void matmul_backward(float* din, float* dweight, float* dbias, const float* dout, const float* in,
                     const float* weight, int64_t N, int C, int OC);

// out (cols, rows) = in (rows, cols)^T; out must not alias in.
void transpose(float* out, const float* in, int64_t rows, int64_t cols);

// ---- gelu.cpp (tanh approximation, as GPT-2) ----
void gelu_forward(float* out, const float* in, size_t n);  // out may alias in
// dx = dy * GELU'(pre_act); dx may alias dy.
void gelu_backward(float* dx, const float* dy, const float* pre_act, size_t n);

// ---- attention.cpp ----
// Causal attention, scale 1/sqrt(HS). qkv (B,T,(NH+2*NKV)*HS) = [NH q heads | NKV k heads |
// NKV v heads], q head h with kv head h / (NH/NKV) (NH a multiple of NKV; NKV = NH is multi-head
// attention); out (B,T,NH*HS); stats (B,NH,T) = logsumexp over s <= t of the scaled scores.
// scratch: attention_scratch_floats(T, HS, threads) floats, threads >= omp_get_max_threads().
size_t attention_scratch_floats(int T, int HS, int threads);
// With dropout.on(), the probabilities are dropped after stats (dropout_row; Backend's contract).
// doc_starts (B,T) or null: query t of sample b sees keys doc_starts[b*T+t] <= s <= t only.
void attention_forward(float* out, float* stats, const float* qkv, float* scratch, int B, int T,
                       int NH, int NKV, int HS, const DropoutKey& dropout = DropoutKey(),
                       const int32_t* doc_starts = nullptr);
// dqkv (B,T,(NH+2*NKV)*HS) overwritten (a kv head's gradient sums over its query heads); the
// probabilities are recomputed from qkv and stats, and sum_s p_ts dp_ts as dout_t . out_t.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* stats, float* scratch, int B, int T, int NH, int NKV, int HS,
                        const DropoutKey& dropout = DropoutKey(),
                        const int32_t* doc_starts = nullptr);

// ---- documents.cpp (Data.packing: documents as a variable-length batch; the CPU twins of
// cuda/attention_documents.cu, which feed cuDNN's fused attention) ----
// The documents of doc_starts (B,T), in row order, as sequences of the packed B*T rows:
// seq_len[i] (capacity) their lengths and first_row[i] (capacity + 1) their first rows; entries
// past the last document are empty sequences (length 0) at row B*T, and so is first_row[capacity].
// Documents past `capacity` are left out (the caller sizes capacity from MeasureDocuments).
void document_sequences(int32_t* seq_len, int32_t* first_row, const int32_t* doc_starts, int B,
                        int T, int capacity);
// The attention statistics in two layouts: by_head (B,NH,T), the ops' contract, and by_row
// (B*T,NH), the packed rows' (cuDNN's ragged statistics). to_rows: by_head -> by_row, else back.
void transpose_attention_stats(float* by_row, float* by_head, int B, int T, int NH, bool to_rows);

// ---- rmsnorm.cpp (Llama family) ----
// out (N,C), rstd (N) = 1/sqrt(mean(in^2) + eps); out = in * rstd * weight (C).
void rmsnorm_forward(float* out, float* rstd, const float* in, const float* weight, int64_t N,
                     int C, float eps);
// din (N,C) += ; dweight (C) += .
void rmsnorm_backward(float* din, float* dweight, const float* dout, const float* in,
                      const float* weight, const float* rstd, int64_t N, int C);
// Per-head RMSNorm of the q heads (q_weight) and k heads (k_weight) of in (N,(NH+2*NKV)*HD);
// v heads copied. rstd (N, NH+NKV).
void qk_norm_forward(float* out, float* rstd, const float* in, const float* q_weight,
                     const float* k_weight, int64_t N, int NH, int NKV, int HD, float eps);
// din (N,(NH+2*NKV)*HD) overwritten (may alias dout; v heads = dout's); dq_weight, dk_weight
// (HD) += .
void qk_norm_backward(float* din, float* dq_weight, float* dk_weight, const float* dout,
                      const float* in, const float* q_weight, const float* k_weight,
                      const float* rstd, int64_t N, int NH, int NKV, int HD);

// ---- rope.cpp (rotate-half layout, in place on the q and k heads of qkv (B,T,(NH+2*NKV)*HD);
// cos_sin (2, P, HD/2), P >= T; inverse rotates by -angle: the backward pass; doc_starts (B,T)
// or null: token t of sample b at position t - doc_starts[b*T+t], else t) ----
void rope(float* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int HD, int P,
          bool inverse, const int32_t* doc_starts = nullptr);

// ---- swiglu.cpp ----
// out (N,F) = silu(gate_up[:, :F]) * gate_up[:, F:]; gate_up (N,2F).
void swiglu_forward(float* out, const float* gate_up, int64_t N, int F);
// dgate_up (N,2F) = [dout * up * silu'(gate) | dout * silu(gate)].
// out (N,F), where given: the forward's out as well (swiglu_forward's, to the bit).
void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int64_t N, int F,
                     float* out = nullptr);

// ---- moe.cpp (mixture of experts; E experts, K chosen per token, K2 = K (+1 with a shared
// expert's gate), E2 = E (+1 likewise); see Backend's Moe* ops) ----
struct MoeRouterShape {
  int64_t N;
  int E, K;
  bool sigmoid, pre_softmax, norm_topk_prob, shared_gate;
  int E2() const { return E + (shared_gate ? 1 : 0); }
  int K2() const { return K + (shared_gate ? 1 : 0); }
};
// logits (N,E2) -> weights (N,K2), experts (N,K) ascending, probs (N,E), lse (N); bias (E) or
// null, added to the choice's keys only.
void moe_router_forward(float* weights, int32_t* experts, float* probs, float* lse,
                        const float* logits, const float* bias, const MoeRouterShape& s);
// dlogits (N,E2) from dweights (N,K2), aux_coef (G,E) or null, z_scale.
void moe_router_backward(float* dlogits, const float* dweights, const float* logits,
                         const float* probs, const int32_t* experts, const float* weights,
                         const float* aux_coef, int64_t groups, float z_scale,
                         const MoeRouterShape& s);
// The router's losses over G groups of N/G rows (Backend::MoeRouterLosses): aux_coef (G,E), or
// null without the load-balancing loss (aux = 0), and losses[0..1] = {aux loss, z-loss} from
// experts (N,K), probs (N,E), lse (N); sigmoid scores are normalised per token.
struct MoeLossShape {
  int64_t N, G;
  int E, K;
  bool sigmoid;
};
void moe_router_losses(float* aux_coef, double* losses, const int32_t* experts, const float* probs,
                       const float* lse, const MoeLossShape& s, double aux, double z,
                       float loss_scale);
// The dispatch (Backend::MoeDispatchSlots): counts (E) = the choices of each expert in experts
// (N,K); slots (N,K2) = each choice's row after the stable counting sort by expert, an expert's
// group holding its first `capacity` choices (0: all), -1 past it; k = K (K2 = K + 1) is the
// shared expert's row N*K + t. A choice outside [0, E) (no expert) is dropped and not counted.
void moe_dispatch_slots(int32_t* slots, int32_t* counts, const int32_t* experts, int64_t N, int K,
                        int K2, int E, int64_t capacity);
// out[slots[t][k]] = [w[t][k] *] in[t], C columns; w may be null.
void moe_scatter_rows(float* out, const float* in, const int32_t* slots, const float* w,
                      int64_t N, int K2, int64_t C);
// out[t] (+)= sum_k [w[t][k] *] in[slots[t][k]], k ascending.
void moe_gather_rows(float* out, const float* in, const int32_t* slots, const float* w,
                     int64_t N, int K2, int64_t C, bool accumulate);
// dw[t][k] = dout[t] . in[slots[t][k]].
void moe_slot_dots(float* dw, const float* dout, const float* in, const int32_t* slots, int64_t N,
                   int K2, int64_t C);

// ---- cross_entropy.cpp (vocabulary-parallel; logits (N,V) hold global columns
// [vocab_start, vocab_start + V), of which only those < vocab_size are real) ----
// row_max (N) = max over real columns (-inf when there are none).
void crossentropy_row_max(float* row_max, const float* logits, int64_t N, int V, int vocab_start,
                          int vocab_size);
// sums (2,N): row 0 = sum over real columns of exp(logit - row_max); row 1 = the target's logit
// when it is one of this rank's real columns, else 0.
void crossentropy_sums(float* sums, const float* logits, const float* row_max,
                       const int32_t* targets, int64_t N, int V, int vocab_start, int vocab_size);
// losses (N) = log(sums[0]) + row_max - sums[1]; dlogits (N,V) = dloss_scale * (softmax -
// onehot(target)), zero on padding columns (skipped when null; may alias logits).
void crossentropy_backward(float* losses, float* dlogits, const float* logits, const float* row_max,
                           const float* sums, const int32_t* targets, int64_t N, int V,
                           int vocab_start, int vocab_size, float dloss_scale);

// ---- adamw.cpp ----
// One AdamW step's constants: the hyperparameters, the gradient's scale and the bias
// corrections of step `step` (1-based).
struct AdamWStepConstants {
  AdamWStepConstants(float lr, float beta1, float beta2, float eps, float weight_decay, int step,
                     float grad_scale);
  float lr, beta1, beta2, eps, weight_decay, grad_scale, bias_correction1, bias_correction2;
};
// One AdamW step (decoupled weight decay, bias-corrected) over n elements; then param = master.
// param may alias master.
void adamw_update(float* param, float* master, const float* grad, float* m, float* v, size_t n,
                  const AdamWStepConstants& s);
// The same with the master weights as two halves (common/master_remainder.h): param (bf16 bits)
// and remainder, both read and written.
void adamw_update_halves(uint16_t* param, uint16_t* remainder, const float* grad, float* m,
                         float* v, size_t n, const AdamWStepConstants& s);
// Sum of squares accumulated in double, in a fixed order.
double sum_squares(const float* x, size_t n);

}  // namespace cpu
}  // namespace trainer
