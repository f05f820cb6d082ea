// CudaBackend's mixture-of-experts ops (router, its losses, the dispatch's slots, row scatter and
// gather, slot dots): the Run* hooks that Backend's public ops call after checking their
// contracts (moe_contracts.cpp), then the launchers of moe.cu and moe_dispatch.cu. The router's
// tensors are f32 on every backend; the rows are compute.
#include <vector>

#include "model/cpu/cpu_kernels.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/kernels.h"

namespace trainer {

namespace {

cuda::MoeRouterDims RouterDims(Tensor logits, const MoeRouting& r) {
  const int E = static_cast<int>(Cols(logits)) - (r.shared_gate ? 1 : 0);
  return {Rows(logits), E, r.top_k, r.sigmoid, r.pre_softmax, r.norm_topk_prob, r.shared_gate};
}

// K' of slots (N,K') for `rows` (N, C).
int SlotsPerRow(Tensor slots, Tensor rows) {
  return static_cast<int>(slots.numel() / Rows(rows));
}

const float* OrNull(Tensor t) {
  return t.empty() ? nullptr : t.as<float>();
}

}  // namespace

Status CudaBackend::RunMoeRouterForward(Tensor weights, Tensor experts, Tensor probs, Tensor lse,
                                        Tensor logits, Tensor bias, const MoeRouting& r) {
  if (!bias.empty() && bias.dtype != DType::kF32) {  // the bf16 parameter copy, widened
    void* wide = nullptr;
    TRAINER_RETURN_IF_ERROR(Scratch(bias.numel() * sizeof(float), &wide));
    Tensor f32(wide, DType::kF32, {bias.numel()});
    TRAINER_RETURN_IF_ERROR(RunConvert(f32, bias));
    bias = f32;
  }
  CUDA_CHECK(cuda::LaunchMoeRouterForward(weights.as<float>(), experts.as<int32_t>(),
                                          probs.as<float>(), lse.as<float>(), logits.as<float>(),
                                          OrNull(bias), RouterDims(logits, r), stream_));
  return Status::Ok();
}

Status CudaBackend::RunMoeRouterBackward(Tensor dlogits, Tensor dweights, Tensor logits,
                                         Tensor probs, Tensor experts, Tensor weights,
                                         Tensor aux_coef, float z_scale, const MoeRouting& r) {
  CUDA_CHECK(cuda::LaunchMoeRouterBackward(
      dlogits.as<float>(), dweights.as<float>(), logits.as<float>(), probs.as<float>(),
      experts.as<int32_t>(), weights.as<float>(), OrNull(aux_coef),
      aux_coef.empty() ? 0 : Rows(aux_coef), z_scale, RouterDims(logits, r), stream_));
  return Status::Ok();
}

Status CudaBackend::RunMoeRouterLosses(Tensor aux_coef, Tensor losses, Tensor experts, Tensor probs,
                                       Tensor lse, const MoeLossCoefficients& c) {
  const cuda::MoeLossDims d{Rows(probs), aux_coef.empty() ? 1 : Rows(aux_coef),
                            static_cast<int>(Cols(probs)),
                            static_cast<int>(experts.numel() / Rows(probs)), c.sigmoid};
  void* workspace = nullptr;
  const size_t bytes = cuda::MoeRouterLossesWorkspace(d, !aux_coef.empty());
  if (bytes > 0) TRAINER_RETURN_IF_ERROR(Scratch(bytes, &workspace));
  CUDA_CHECK(cuda::LaunchMoeRouterLosses(
      aux_coef.empty() ? nullptr : aux_coef.as<float>(), losses.as<double>(), experts.as<int32_t>(),
      probs.as<float>(), lse.as<float>(), d, c.aux, c.z, c.loss_scale, workspace, stream_));
  return Status::Ok();
}

Status CudaBackend::RunMoeDispatchSlots(Tensor slots, Tensor counts, Tensor experts,
                                       int64_t capacity) {
  const int64_t N = Rows(experts);
  const int K = static_cast<int>(Cols(experts)), K2 = static_cast<int>(Cols(slots));
  const int E = static_cast<int>(counts.numel());
  if (!cuda::MoeDispatchSupported(E)) {  // more experts than the bitmap holds: on the host
    std::vector<int32_t> host_experts(N * K), host_slots(N * K2), host_counts(E);
    TRAINER_RETURN_IF_ERROR(CopyToHost(host_experts.data(), experts.data, N * K * 4));
    cpu::moe_dispatch_slots(host_slots.data(), host_counts.data(), host_experts.data(), N, K, K2,
                            E, capacity);
    TRAINER_RETURN_IF_ERROR(CopyToDevice(slots.data, host_slots.data(), N * K2 * 4));
    return CopyToDevice(counts.data, host_counts.data(), E * 4);
  }
  void* workspace = nullptr;
  TRAINER_RETURN_IF_ERROR(Scratch(cuda::MoeDispatchWorkspace(N, E), &workspace));
  CUDA_CHECK(cuda::LaunchMoeDispatchSlots(slots.as<int32_t>(), counts.as<int32_t>(),
                                          experts.as<int32_t>(), N, K, K2, E, capacity, workspace,
                                          stream_));
  return Status::Ok();
}

Status CudaBackend::RunMoeScatterRows(Tensor out, Tensor in, Tensor slots, Tensor weights) {
  CUDA_CHECK(cuda::LaunchMoeScatterRows(compute_, out.data, in.data, slots.as<int32_t>(),
                                        OrNull(weights), Rows(in), SlotsPerRow(slots, in), Cols(in),
                                        stream_));
  return Status::Ok();
}

Status CudaBackend::RunMoeGatherRows(Tensor out, Tensor in, Tensor slots, Tensor weights,
                                     bool accumulate) {
  CUDA_CHECK(cuda::LaunchMoeGatherRows(compute_, out.data, in.data, slots.as<int32_t>(),
                                       OrNull(weights), Rows(out), SlotsPerRow(slots, out),
                                       Cols(out), accumulate, stream_));
  return Status::Ok();
}

Status CudaBackend::RunMoeSlotDots(Tensor dweights, Tensor dout, Tensor in, Tensor slots) {
  CUDA_CHECK(cuda::LaunchMoeSlotDots(compute_, dweights.as<float>(), dout.data, in.data,
                                     slots.as<int32_t>(), Rows(dout), SlotsPerRow(slots, dout),
                                     Cols(dout), stream_));
  return Status::Ok();
}

}  // namespace trainer
