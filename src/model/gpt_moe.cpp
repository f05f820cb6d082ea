// GptModel's MoE buffers (gpt.h, moe_layer.h): each MoE layer's activations per slot, and the
// backward's scratch shared by the MoE layers. With expert parallelism (ep = partition().ep_size)
// the experts' side holds up to ep * N * K rows: every EP rank may route all its N tokens' K
// choices to this rank's experts. The layers share one `out` (read only by the block's forward,
// at once); under Model.recompute gelu and selective one SwiGLU output (act), and under selective
// one x_perm too, both made again in backward.
#include "model/gpt.h"

namespace trainer {

MoeActivations GptModel::AllocateMoeActivations(const MoeActivations& shared) {
  const MoeSpec& e = spec_.moe;
  const int64_t N = static_cast<int64_t>(B_) * T_, C = config_.hidden_size, E = e.num_experts;
  const int64_t K = e.top_k, K2 = e.router_rows() - E + K, F = e.ffn, Fs = e.shared_ffn;
  const int64_t R = N * K * partition_.ep_size;  // the experts' side
  MoeActivations m;
  m.logits = Alloc({N, e.router_rows()}, DType::kF32);
  m.probs = Alloc({N, E}, DType::kF32);
  m.lse = Alloc({N}, DType::kF32);
  m.weights = Alloc({N, K2}, DType::kF32);
  m.experts = Alloc({N, K}, DType::kI32);
  m.slots = Alloc({N, K2}, DType::kI32);
  m.counts = Alloc({E}, DType::kI32);
  if (e.aux_loss_coeff > 0)
    m.aux_coef = Alloc({e.aux_loss == MoeAuxLoss::kSequence ? B_ : 1, E}, DType::kF32);
  m.losses = Alloc({2}, DType::kF64);
  m.x_perm = shared.x_perm.empty() ? Alloc({N * K2, C}, compute_) : shared.x_perm;
  if (partition_.ep_size > 1) {
    m.x_recv = Alloc({R, C}, compute_);
    m.y_recv = Alloc({R, C}, compute_);
  }
  m.h = Alloc({R, 2 * F}, compute_);
  m.act = shared.act.empty() ? Alloc({R, F}, compute_) : shared.act;
  if (Fs > 0) {
    m.shared_h = Alloc({N, 2 * Fs}, compute_);
    m.shared_act = Alloc({N, Fs}, compute_);
  }
  m.y = Alloc({N * K2, C}, compute_);
  m.out = shared.out.empty() ? Alloc({N, C}, compute_) : shared.out;
  return m;
}

MoeScratch GptModel::AllocateMoeScratch() {
  const MoeSpec& e = spec_.moe;
  const int64_t N = static_cast<int64_t>(B_) * T_, C = config_.hidden_size;
  const int64_t K = e.top_k, K2 = e.router_rows() - e.num_experts + K;
  const int64_t R = N * K * partition_.ep_size;
  MoeScratch m;
  m.dweights = Alloc({N, K2}, DType::kF32);
  m.dlogits = Alloc({N, e.router_rows()}, DType::kF32);
  m.dy = Alloc({N * K2, C}, compute_);
  m.dx_perm = Alloc({N * K2, C}, compute_);
  if (partition_.ep_size > 1) {
    m.dy_recv = Alloc({R, C}, compute_);
    m.dx_recv = Alloc({R, C}, compute_);
  }
  m.dh = Alloc({R, 2 * e.ffn}, compute_);
  m.dact = Alloc({R, e.ffn}, compute_);
  if (e.shared_ffn > 0) {
    m.shared_dh = Alloc({N, 2 * e.shared_ffn}, compute_);
    m.shared_dact = Alloc({N, e.shared_ffn}, compute_);
  }
  return m;
}

}  // namespace trainer
