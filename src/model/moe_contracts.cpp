// The contracts of Backend's mixture-of-experts ops (backend.h), checked once for every backend
// (op_contract.h) before the backend's Run* hook, and the hooks' default: a backend without MoE
// kernels refuses them in one line (the CPU's are in cpu/moe.cpp, the GPU's in cuda/moe.cu).
#include "model/backend.h"
#include "model/op_contract.h"

namespace trainer {

using contract::OpContract;

namespace {

int Width(int n, bool extra) {
  return n + (extra ? 1 : 0);
}

// The router's tensors agree with logits (N,E') and r: E experts, K chosen.
void CheckRouter(OpContract& c, Tensor weights, Tensor experts, Tensor probs, Tensor logits,
                 const MoeRouting& r) {
  const int64_t N = Rows(logits), E = Cols(logits) - (r.shared_gate ? 1 : 0);
  c.Has("logits", logits, DType::kF32, -1)
      .Require(E >= 1 && r.top_k >= 1 && r.top_k <= E,
               StrFormat("top_k %d must be in [1, %lld], the experts of logits %s", r.top_k,
                         static_cast<long long>(E), logits.shape_string().c_str()))
      .Has("weights", weights, DType::kF32, N * Width(r.top_k, r.shared_gate))
      .Has("experts", experts, DType::kI32, N * r.top_k)
      .Has("probs", probs, DType::kF32, N * E);
}

// in (M,C) or (N,C) and out agree on C; slots (N,K') i32 with N = Rows(tokens); weights likewise.
void CheckSlots(OpContract& c, DType cd, const char* tokens_name, Tensor tokens,
                const char* rows_name, Tensor rows, Tensor slots, Tensor weights) {
  c.Has(tokens_name, tokens, cd, -1)
      .Has(rows_name, rows, cd, -1)
      .Agree(tokens_name, tokens, rows_name, rows, "the last dimension", Cols(tokens), Cols(rows))
      .Has("slots", slots, DType::kI32, -1)
      .Require(Rows(tokens) > 0 && slots.numel() % Rows(tokens) == 0,
               StrFormat("slots %s must hold K' slots for each of the %lld rows of %s",
                         slots.shape_string().c_str(), static_cast<long long>(Rows(tokens)),
                         tokens_name))
      .Optional(weights)
      .SameCount("weights", weights, DType::kF32, "slots", slots);
}

Status NoMoeKernels(const Backend& b, const char* op) {
  return RuntimeError(StrFormat(
      "%s (%s backend): this backend has no mixture-of-experts kernels. Set Global.device=cpu",
      op, b.name().c_str()));
}

}  // namespace

Status Backend::MoeRouterForward(Tensor weights, Tensor experts, Tensor probs, Tensor lse,
                                 Tensor logits, Tensor bias, const MoeRouting& r) {
  OpContract c(*this, "MoeRouterForward");
  CheckRouter(c, weights, experts, probs, logits, r);
  // The bias: f32, or the compute dtype (the GPU's bf16 copy of the parameter).
  const DType bias_dtype = bias.dtype == compute_dtype() ? compute_dtype() : DType::kF32;
  c.Has("lse", lse, DType::kF32, Rows(logits)).Optional(bias).PerColumn("bias", bias, bias_dtype,
                                                                         "probs", probs);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMoeRouterForward(weights, experts, probs, lse, logits, bias, r);
}

Status Backend::MoeRouterBackward(Tensor dlogits, Tensor dweights, Tensor logits, Tensor probs,
                                  Tensor experts, Tensor weights, Tensor aux_coef, float z_scale,
                                  const MoeRouting& r) {
  OpContract c(*this, "MoeRouterBackward");
  CheckRouter(c, weights, experts, probs, logits, r);
  const int64_t N = Rows(logits), E = Cols(probs);
  c.Like("dlogits", dlogits, DType::kF32, "logits", logits)
      .Like("dweights", dweights, DType::kF32, "weights", weights)
      .Optional(aux_coef)
      .Has("aux_coef", aux_coef, DType::kF32, -1)
      .Require(aux_coef.empty() || (Cols(aux_coef) == E && N % Rows(aux_coef) == 0),
               StrFormat("aux_coef %s must be (G, %lld) with G dividing the %lld rows",
                         aux_coef.shape_string().c_str(), static_cast<long long>(E),
                         static_cast<long long>(N)));
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMoeRouterBackward(dlogits, dweights, logits, probs, experts, weights, aux_coef,
                              z_scale, r);
}

Status Backend::MoeRouterLosses(Tensor aux_coef, Tensor losses, Tensor experts, Tensor probs,
                                Tensor lse, const MoeLossCoefficients& k) {
  OpContract c(*this, "MoeRouterLosses");
  const int64_t N = Rows(probs), E = Cols(probs);
  c.Has("probs", probs, DType::kF32, -1)
      .Has("experts", experts, DType::kI32, -1)
      .Require(N > 0 && experts.numel() % N == 0 && experts.numel() / N >= 1 &&
                   experts.numel() / N <= E,
               StrFormat("experts %s must be (N, K) with K in [1, %lld] for the %lld rows of "
                         "probs %s",
                         experts.shape_string().c_str(), static_cast<long long>(E),
                         static_cast<long long>(N), probs.shape_string().c_str()))
      .Has("lse", lse, DType::kF32, N)
      .Has("losses", losses, DType::kF64, 2)
      .Require(k.aux >= 0 && k.z >= 0,
               StrFormat("the loss coefficients (aux %g, z %g) must be >= 0", k.aux, k.z))
      .Require((k.aux > 0) == !aux_coef.empty(),
               StrFormat("aux_coef %s must be given exactly when the aux coefficient (%g) is > 0",
                         aux_coef.shape_string().c_str(), k.aux))
      .Optional(aux_coef)
      .Has("aux_coef", aux_coef, DType::kF32, -1)
      .Require(aux_coef.empty() || (Cols(aux_coef) == E && Rows(aux_coef) > 0 &&
                                    N % Rows(aux_coef) == 0),
               StrFormat("aux_coef %s must be (G, %lld) with G dividing the %lld rows",
                         aux_coef.shape_string().c_str(), static_cast<long long>(E),
                         static_cast<long long>(N)));
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMoeRouterLosses(aux_coef, losses, experts, probs, lse, k);
}

Status Backend::MoeDispatchSlots(Tensor slots, Tensor counts, Tensor experts, int64_t capacity) {
  OpContract c(*this, "MoeDispatchSlots");
  const int64_t N = Rows(experts), K = Cols(experts), E = counts.numel();
  c.Has("experts", experts, DType::kI32, -1)
      .Has("counts", counts, DType::kI32, -1)
      .Has("slots", slots, DType::kI32, -1)
      .Require(Rows(slots) == N && (Cols(slots) == K || Cols(slots) == K + 1),
               StrFormat("slots %s must be (%lld, %lld or %lld) for experts %s",
                         slots.shape_string().c_str(), static_cast<long long>(N),
                         static_cast<long long>(K), static_cast<long long>(K + 1),
                         experts.shape_string().c_str()))
      .Require(K <= E && capacity >= 0 && N * (K + 1) < (int64_t{1} << 31),
               StrFormat("%lld rows of %lld choices of %lld experts (capacity %lld): more "
                         "choices than experts, or more rows than i32 slots hold",
                         static_cast<long long>(N), static_cast<long long>(K),
                         static_cast<long long>(E), static_cast<long long>(capacity)));
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMoeDispatchSlots(slots, counts, experts, capacity);
}

Status Backend::MoeScatterRows(Tensor out, Tensor in, Tensor slots, Tensor weights) {
  OpContract c(*this, "MoeScatterRows");
  CheckSlots(c, compute_dtype(), "in", in, "out", out, slots, weights);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMoeScatterRows(out, in, slots, weights);
}

Status Backend::MoeGatherRows(Tensor out, Tensor in, Tensor slots, Tensor weights,
                              bool accumulate) {
  OpContract c(*this, "MoeGatherRows");
  CheckSlots(c, compute_dtype(), "out", out, "in", in, slots, weights);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMoeGatherRows(out, in, slots, weights, accumulate);
}

Status Backend::MoeSlotDots(Tensor dweights, Tensor dout, Tensor in, Tensor slots) {
  OpContract c(*this, "MoeSlotDots");
  CheckSlots(c, compute_dtype(), "dout", dout, "in", in, slots, Tensor());
  c.SameCount("dweights", dweights, DType::kF32, "slots", slots);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunMoeSlotDots(dweights, dout, in, slots);
}

Status Backend::RunMoeRouterForward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                    const MoeRouting&) {
  return NoMoeKernels(*this, "MoeRouterForward");
}
Status Backend::RunMoeRouterBackward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, float,
                                     const MoeRouting&) {
  return NoMoeKernels(*this, "MoeRouterBackward");
}
Status Backend::RunMoeRouterLosses(Tensor, Tensor, Tensor, Tensor, Tensor,
                                   const MoeLossCoefficients&) {
  return NoMoeKernels(*this, "MoeRouterLosses");
}
Status Backend::RunMoeDispatchSlots(Tensor, Tensor, Tensor, int64_t) {
  return NoMoeKernels(*this, "MoeDispatchSlots");
}
Status Backend::RunMoeScatterRows(Tensor, Tensor, Tensor, Tensor) {
  return NoMoeKernels(*this, "MoeScatterRows");
}
Status Backend::RunMoeGatherRows(Tensor, Tensor, Tensor, Tensor, bool) {
  return NoMoeKernels(*this, "MoeGatherRows");
}
Status Backend::RunMoeSlotDots(Tensor, Tensor, Tensor, Tensor) {
  return NoMoeKernels(*this, "MoeSlotDots");
}

}  // namespace trainer
