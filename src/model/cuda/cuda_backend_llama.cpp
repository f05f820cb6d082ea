// CudaBackend's Llama-family ops (RMSNorm, q/k norm, RoPE, SwiGLU): the Run* hooks that
// Backend's public ops call after checking their contracts (backend.cpp), so only what the GPU
// kernels add to those contracts is checked here; then the launchers of rmsnorm.cu, qk_norm.cu,
// rope.cu and swiglu.cu.
#include "common/log.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/kernels.h"
#include "model/cuda/op_checks.h"

namespace trainer {

using cuda::OpError;

namespace {

// Rows of the RMSNorm backward's shared-memory dweight row (rmsnorm.cu).
constexpr int64_t kMaxRmsNormColumns = 40960;

// The head size of qkv (B,T,(NH+2*NKV)*HD) (its split was checked by the caller's contract).
int64_t HeadSize(const Tensor& qkv, int num_heads, int num_kv_heads) {
  return Cols(qkv) / (static_cast<int64_t>(num_heads) + 2 * static_cast<int64_t>(num_kv_heads));
}

}  // namespace

Status CudaBackend::RunRmsNormForward(Tensor out, Tensor rstd, Tensor in, Tensor weight,
                                      float eps) {
  return RunAddRmsNormForward(Tensor(), out, rstd, in, Tensor(), weight, eps);
}

Status CudaBackend::RunAddRmsNormForward(Tensor residual, Tensor out, Tensor rstd, Tensor a,
                                         Tensor b, Tensor weight, float eps) {
  CUDA_CHECK(cuda::LaunchRmsNormForward(compute_, out.data, rstd.as<float>(), residual.data, a.data,
                                        b.data, weight.data, Rows(a), static_cast<int>(Cols(a)),
                                        eps, stream_));
  return Status::Ok();
}

Status CudaBackend::RunRmsNormBackward(Tensor din, Tensor dweight, Tensor dout, Tensor in,
                                       Tensor weight, Tensor rstd) {
  const int64_t N = Rows(in), C = Cols(in);
  if (C > kMaxRmsNormColumns)
    return OpError("RmsNormBackward", StrFormat("rows of %lld columns, more than the %lld the "
                                                "GPU kernel holds",
                                                (long long)C, (long long)kMaxRmsNormColumns));
  void* scratch = nullptr;
  TRAINER_RETURN_IF_ERROR(
      Scratch(cuda::RmsNormBackwardScratchFloats(compute_, N, static_cast<int>(C)) * sizeof(float),
              &scratch));
  CUDA_CHECK(cuda::LaunchRmsNormBackward(
      compute_, din.data, dweight.as<float>(), dout.data, in.data, weight.data, rstd.as<float>(), N,
      static_cast<int>(C), static_cast<float*>(scratch), stream_));
  return Status::Ok();
}

Status CudaBackend::RunQkNormForward(Tensor out, Tensor rstd, Tensor in, Tensor q_weight,
                                     Tensor k_weight, int num_heads, int num_kv_heads, float eps) {
  const int64_t HD = HeadSize(in, num_heads, num_kv_heads);
  if (HD > cuda::kMaxQkNormHeadSize)
    return OpError("QkNormForward", StrFormat("head size %lld is over the GPU kernel's %d",
                                              (long long)HD, cuda::kMaxQkNormHeadSize));
  CUDA_CHECK(cuda::LaunchQkNormForward(compute_, out.data, rstd.as<float>(), in.data, q_weight.data,
                                       k_weight.data, Rows(in), num_heads, num_kv_heads,
                                       static_cast<int>(HD), eps, stream_));
  return Status::Ok();
}

Status CudaBackend::RunQkNormBackward(Tensor din, Tensor dq_weight, Tensor dk_weight, Tensor dout,
                                      Tensor in, Tensor q_weight, Tensor k_weight, Tensor rstd,
                                      int num_heads, int num_kv_heads) {
  const int64_t N = Rows(in), HD = HeadSize(in, num_heads, num_kv_heads);
  if (HD > cuda::kMaxQkNormHeadSize)
    return OpError("QkNormBackward", StrFormat("head size %lld is over the GPU kernel's %d",
                                               (long long)HD, cuda::kMaxQkNormHeadSize));
  void* scratch = nullptr;
  TRAINER_RETURN_IF_ERROR(Scratch(
      cuda::QkNormBackwardScratchFloats(N, static_cast<int>(HD)) * sizeof(float), &scratch));
  CUDA_CHECK(cuda::LaunchQkNormBackward(
      compute_, din.data, dq_weight.as<float>(), dk_weight.as<float>(), dout.data, in.data,
      q_weight.data, k_weight.data, rstd.as<float>(), N, num_heads, num_kv_heads,
      static_cast<int>(HD), static_cast<float*>(scratch), stream_));
  return Status::Ok();
}

Status CudaBackend::RunRope(Tensor qkv, Tensor cos_sin, int num_heads, int num_kv_heads,
                            bool inverse, Tensor doc_starts) {
  // qkv (B,T,...) and cos_sin (2,P,HD/2), as the contract checked.
  CUDA_CHECK(cuda::LaunchRope(compute_, qkv.data, cos_sin.as<float>(), Rows(qkv),
                              static_cast<int>(qkv.dim(1)), num_heads, num_kv_heads,
                              static_cast<int>(HeadSize(qkv, num_heads, num_kv_heads)),
                              static_cast<int>(cos_sin.dim(1)), inverse, stream_,
                              doc_starts.empty() ? nullptr : doc_starts.as<int32_t>()));
  return Status::Ok();
}

Status CudaBackend::RunSwiGluForward(Tensor out, Tensor gate_up) {
  CUDA_CHECK(cuda::LaunchSwiGluForward(compute_, out.data, gate_up.data, Rows(gate_up),
                                       static_cast<int>(Cols(gate_up) / 2), stream_));
  return Status::Ok();
}

Status CudaBackend::RunSwiGluBackward(Tensor dgate_up, Tensor dout, Tensor gate_up, Tensor act) {
  CUDA_CHECK(cuda::LaunchSwiGluBackward(compute_, dgate_up.data, dout.data, gate_up.data,
                                        Rows(gate_up), static_cast<int>(Cols(gate_up) / 2),
                                        act.data, stream_));
  return Status::Ok();
}

}  // namespace trainer
