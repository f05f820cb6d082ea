// The mixture-of-experts layer (moe_layer.h): routing plan, forward and backward.
#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/log.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {

void MoeLayerStats::Clear() {
  aux_loss = z_loss = 0;
  std::fill(load.begin(), load.end(), 0);
  dropped = 0;
  micro_batches = 0;
}

int64_t MoeCapacity(const MoeSpec& spec, int64_t tokens) {
  if (spec.capacity_factor <= 0) return 0;
  // An expert gets at most one row a token, so a capacity of `tokens` drops nothing: the bound
  // keeps a large factor's product in int64's range and changes no dispatch.
  const double capacity =
      std::ceil(spec.capacity_factor * static_cast<double>(tokens) * spec.top_k / spec.num_experts);
  return capacity >= static_cast<double>(tokens) ? tokens : static_cast<int64_t>(capacity);
}

void PlanMoeGroups(const MoeSpec& spec, int64_t N, MoeDispatch* d) {
  const int64_t capacity = MoeCapacity(spec, N);
  const int E = spec.num_experts;
  d->offsets.assign(E + 1, 0);
  d->dropped = 0;
  for (int e = 0; e < E; ++e) {
    const int64_t kept = capacity > 0 ? std::min<int64_t>(d->counts[e], capacity) : d->counts[e];
    d->dropped += d->counts[e] - kept;
    d->offsets[e + 1] = d->offsets[e] + kept;
  }
  LocalExpertRuns(d->offsets, &d->runs);
}

void PlanMoeDispatch(const MoeSpec& spec, const int32_t* experts, int64_t N,
                     std::vector<int32_t>* slots, MoeDispatch* out) {
  const int E = spec.num_experts, K = spec.top_k, K2 = K + (spec.shared_ffn > 0 ? 1 : 0);
  out->counts.assign(E, 0);
  slots->assign(N * K2, -1);
  cpu::moe_dispatch_slots(slots->data(), out->counts.data(), experts, N, K, K2, E,
                          MoeCapacity(spec, N));
  PlanMoeGroups(spec, N, out);
}

namespace {

MoeRouting Routing(const MoeSpec& s) {
  MoeRouting r;
  r.top_k = s.top_k;
  r.sigmoid = s.score == MoeScore::kSigmoid;
  r.pre_softmax = s.pre_softmax;
  r.norm_topk_prob = s.norm_topk_prob;
  r.shared_gate = s.shared_ffn > 0;
  return r;
}

// One SwiGLU expert over rows: y (n,C) = down(silu(gate x) * up x); h (n,2F), act (n,F).
Status ExpertForward(Backend* be, Tensor x, Tensor gu, Tensor down, Tensor h, Tensor act,
                     Tensor y) {
  TRAINER_RETURN_IF_ERROR(be->MatmulForward(h, Tensor(), x, gu, Tensor(), Activation::kNone));
  TRAINER_RETURN_IF_ERROR(be->SwiGluForward(act, h));
  return be->MatmulForward(y, Tensor(), act, down, Tensor(), Activation::kNone);
}

// Its backward: dx (n,C) overwritten; dgu, ddown by `write`; dact, dh scratch.
Status ExpertBackward(Backend* be, Tensor x, Tensor gu, Tensor down, Tensor h, Tensor act,
                      Tensor dy, Tensor dgu, Tensor ddown, Tensor dh, Tensor dact, Tensor dx,
                      GradientWrite write) {
  TRAINER_RETURN_IF_ERROR(be->MatmulBackward(dact, ddown, Tensor(), dy, act, down, write));
  TRAINER_RETURN_IF_ERROR(be->SwiGluBackward(dh, dact, h));
  return be->MatmulBackward(dx, dgu, Tensor(), dh, x, gu, write);
}

// The rows the runs cover: they tile [0, rows) (the kept rows of x_perm, or with EP the rows
// received in x_recv), so that SwiGLU runs once over all the experts' rows.
Status CoveredRows(const std::vector<ExpertRun>& runs, int64_t* rows) {
  int64_t total = 0, end = 0;
  for (const ExpertRun& r : runs) total += r.rows, end = std::max(end, r.offset + r.rows);
  if (end != total)
    return RuntimeError(
        StrFormat("MoE: the experts' runs cover %lld rows up to row %lld, not a "
                  "block from row 0",
                  static_cast<long long>(total), static_cast<long long>(end)));
  *rows = total;
  return Status::Ok();
}

bool ExpertParallel(const MoeContext& ctx) {
  return ctx.ep != nullptr && ctx.ep->size() > 1;
}

}  // namespace

Status MoeForward(const MoeContext& ctx, const MoeWeights& w, Tensor x, const MoeActivations& a) {
  Backend* be = ctx.backend;
  const MoeSpec& s = *ctx.spec;
  const int64_t N = Rows(x), K = s.top_k, E = s.num_experts;
  MoeDispatch* d = a.dispatch;
  const float loss_scale = ctx.recompute ? d->loss_scale : ctx.loss_scale;
  TRAINER_RETURN_IF_ERROR(
      be->MatmulForward(a.logits, Tensor(), x, w.router, Tensor(), Activation::kNone));
  TRAINER_RETURN_IF_ERROR(
      be->MoeRouterForward(a.weights, a.experts, a.probs, a.lse, a.logits, w.bias, Routing(s)));
  // The router's losses on the device: the aux loss's coefficients (for the backward) and the
  // values (for the metrics).
  const bool aux = s.aux_loss_coeff > 0, zloss = s.z_loss_coeff > 0;
  if (aux || zloss) {
    MoeLossCoefficients coeffs;
    coeffs.sigmoid = s.score == MoeScore::kSigmoid;
    coeffs.aux = s.aux_loss_coeff;
    coeffs.z = s.z_loss_coeff;
    coeffs.loss_scale = loss_scale;
    TRAINER_RETURN_IF_ERROR(be->MoeRouterLosses(aux ? a.aux_coef : Tensor(), a.losses, a.experts,
                                                a.probs, a.lse, coeffs));
  }
  // The dispatch on the device, the copies of the choices per expert (for the groups' launches)
  // and of the losses to the host, then the permutation, queued before the layer's one wait for
  // the device, which waits for the copies only: the host plans and queues the experts' launches
  // while the rows move, so the GPU does not wait on the planning.
  TRAINER_RETURN_IF_ERROR(be->MoeDispatchSlots(a.slots, a.counts, a.experts, MoeCapacity(s, N)));
  TRAINER_ASSERT(ctx.scratch.host_staging != nullptr, "MoeForward: no host staging");
  double* host_losses = static_cast<double*>(ctx.scratch.host_staging);  // {aux, z}
  int32_t* host_counts = reinterpret_cast<int32_t*>(host_losses + 2);
  const bool record = ctx.record && !ctx.recompute, copy_losses = record && (aux || zloss);
  TRAINER_RETURN_IF_ERROR(be->CopyToHostAsync(host_counts, a.counts.data, E * sizeof(int32_t)));
  if (copy_losses)
    TRAINER_RETURN_IF_ERROR(be->CopyToHostAsync(host_losses, a.losses.data, 2 * sizeof(double)));
  TRAINER_RETURN_IF_ERROR(be->RecordCopies(kMoeCopyMark));
  TRAINER_RETURN_IF_ERROR(be->MoeScatterRows(a.x_perm, x, a.slots, Tensor()));
  TRAINER_RETURN_IF_ERROR(be->WaitForCopies(kMoeCopyMark));
  d->counts.assign(host_counts, host_counts + E);
  double losses[2] = {0, 0};
  if (copy_losses) losses[0] = host_losses[0], losses[1] = host_losses[1];
  PlanMoeGroups(s, N, d);
  const bool ep = ExpertParallel(ctx);
  if (ep)
    TRAINER_RETURN_IF_ERROR(PlanExpertExchange(ctx.ep, d->offsets, Rows(a.x_recv), Cols(a.x_recv),
                                               &d->exchange, &d->runs));
  d->loss_scale = loss_scale;
  d->z_scale = zloss ? static_cast<float>(loss_scale * s.z_loss_coeff / N) : 0.f;
  if (record) {
    MoeLayerStats* st = a.stats;
    st->aux_loss += losses[0];
    st->z_loss += losses[1];
    st->load.resize(E, 0);
    for (int e = 0; e < E; ++e) st->load[e] += d->counts[e];
    st->dropped += d->dropped;
    st->micro_batches += 1;
  }
  // (EP: the permuted rows to the experts' ranks,) the experts over their groups, (EP: back,) the
  // shared expert over every token, combine.
  const Tensor xe = ep ? a.x_recv : a.x_perm, ye = ep ? a.y_recv : a.y;
  if (ep) TRAINER_RETURN_IF_ERROR(ExchangeExpertRows(ctx.ep, d->exchange, a.x_perm, xe, true));
  // The experts: one grouped GEMM for [gate|up] with SwiGLU over all their rows, one for down.
  int64_t rows = 0;
  TRAINER_RETURN_IF_ERROR(CoveredRows(d->runs, &rows));
  if (rows > 0)
    TRAINER_RETURN_IF_ERROR(be->GroupedMatmulSwiGluForward(
        MatrixRows(a.h, 0, rows), MatrixRows(a.act, 0, rows), xe, w.experts_gu, d->runs));
  TRAINER_RETURN_IF_ERROR(be->GroupedMatmulForward(ye, a.act, w.experts_down, d->runs));
  if (ep) TRAINER_RETURN_IF_ERROR(ExchangeExpertRows(ctx.ep, d->exchange, ye, a.y, false));
  if (s.shared_ffn > 0)
    TRAINER_RETURN_IF_ERROR(ExpertForward(be, MatrixRows(a.x_perm, N * K, N), w.shared_gu,
                                          w.shared_down, a.shared_h, a.shared_act,
                                          MatrixRows(a.y, N * K, N)));
  return be->MoeGatherRows(a.out, a.y, a.slots, a.weights, false);
}

Status MoeBackward(const MoeContext& ctx, const MoeWeights& w, const MoeWeights& g, Tensor x,
                   const MoeActivations& a, Tensor dout, Tensor dx) {
  Backend* be = ctx.backend;
  const MoeSpec& s = *ctx.spec;
  const MoeScratch& sc = ctx.scratch;
  const int64_t N = Rows(x), K = s.top_k;
  const MoeDispatch* d = a.dispatch;
  if (ctx.rebuild_x_perm) TRAINER_RETURN_IF_ERROR(be->MoeScatterRows(a.x_perm, x, a.slots, Tensor()));
  // The combine: out[t] = sum_k w[t][k] y[slot].
  TRAINER_RETURN_IF_ERROR(be->MoeSlotDots(sc.dweights, dout, a.y, a.slots));
  TRAINER_RETURN_IF_ERROR(be->MoeScatterRows(sc.dy, dout, a.slots, a.weights));
  // EP: dy to the experts' ranks, dx back, as the forward moved x and y.
  const bool ep = ExpertParallel(ctx);
  const Tensor xe = ep ? a.x_recv : a.x_perm, dye = ep ? sc.dy_recv : sc.dy,
               dxe = ep ? sc.dx_recv : sc.dx_perm;
  if (ep) TRAINER_RETURN_IF_ERROR(ExchangeExpertRows(ctx.ep, d->exchange, sc.dy, dye, true));
  // The experts' backward, as their forward: down's with SwiGLU's in one op (which makes act
  // again where the layers share it), then [gate|up]'s.
  TRAINER_RETURN_IF_ERROR(be->GroupedMatmulSwiGluBackward(
      sc.dh, g.experts_down, sc.dact, dye, a.act, a.h, w.experts_down, d->runs,
      ctx.weight_gradients, g.experts_down.empty() ? Tensor() : ctx.grad_squares, ctx.act_source));
  TRAINER_RETURN_IF_ERROR(be->GroupedMatmulBackward(
      dxe, g.experts_gu, sc.dh, xe, w.experts_gu, d->runs, ctx.weight_gradients,
      g.experts_gu.empty() ? Tensor() : ctx.grad_squares));
  if (ep) TRAINER_RETURN_IF_ERROR(ExchangeExpertRows(ctx.ep, d->exchange, dxe, sc.dx_perm, false));
  if (s.shared_ffn > 0)
    TRAINER_RETURN_IF_ERROR(ExpertBackward(
        be, MatrixRows(a.x_perm, N * K, N), w.shared_gu, w.shared_down, a.shared_h, a.shared_act,
        MatrixRows(sc.dy, N * K, N), g.shared_gu, g.shared_down, sc.shared_dh, sc.shared_dact,
        MatrixRows(sc.dx_perm, N * K, N), ctx.weight_gradients));
  // The router, then the permutation's backward added to its input gradient.
  TRAINER_RETURN_IF_ERROR(
      be->MoeRouterBackward(sc.dlogits, sc.dweights, a.logits, a.probs, a.experts, a.weights,
                            s.aux_loss_coeff > 0 ? a.aux_coef : Tensor(), d->z_scale, Routing(s)));
  TRAINER_RETURN_IF_ERROR(
      be->MatmulBackward(dx, g.router, Tensor(), sc.dlogits, x, w.router, ctx.weight_gradients));
  return be->MoeGatherRows(dx, sc.dx_perm, a.slots, Tensor(), true);
}

}  // namespace trainer
