// CudaBackend's layer ops: the Run* hooks that Backend's public ops call after checking their
// contracts (op_contracts.cpp), so only the routes are chosen here (cuBLASLt, cuDNN or custom
// kernels) and only what they add to the contracts is refused here. Matmuls are row-major here and
// column-major to cuBLASLt: y = x W^T is y^T (OC,N) = W (as (C,OC) column-major, transposed) times
// x^T (C,N).
#include "common/log.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/kernels.h"
#include "model/cuda/matmul.h"
#include "model/cuda/matmul_gelu_cudnn.h"
#include "model/cuda/op_checks.h"

namespace trainer {

using cuda::OpError;

// ---- embedding ----

Status CudaBackend::RunEmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe,
                                        int vocab_start) {
  const int64_t N = tokens.numel(), T = Cols(tokens), C = Cols(wte), V = Rows(wte);
  CUDA_CHECK(cuda::LaunchEmbeddingForward(compute_, out.data, tokens.as<int32_t>(), wte.data,
                                          wpe.data, N, static_cast<int>(T), static_cast<int>(C),
                                          vocab_start, static_cast<int>(V), stream_));
  return Status::Ok();
}

Status CudaBackend::RunEmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                         int vocab_start) {
  const int64_t N = tokens.numel(), T = Cols(tokens), C = Cols(dwte), V = Rows(dwte);
  CUDA_CHECK(cuda::LaunchEmbeddingBackward(
      compute_, dwte.as<float>(), dwpe.empty() ? nullptr : dwpe.as<float>(), dout.data,
      tokens.as<int32_t>(), static_cast<int>(N / T), static_cast<int>(T), static_cast<int>(C),
      vocab_start, static_cast<int>(V), stream_));
  return Status::Ok();
}

// ---- layer norm ----

Status CudaBackend::RunLayerNormForward(Tensor out, Tensor mean, Tensor rstd, Tensor in,
                                        Tensor weight, Tensor bias) {
  return RunAddLayerNormForward(Tensor(), out, mean, rstd, in, Tensor(), weight, bias);
}

Status CudaBackend::RunAddLayerNormForward(Tensor residual, Tensor out, Tensor mean, Tensor rstd,
                                           Tensor a, Tensor b, Tensor weight, Tensor bias) {
  const int64_t N = Rows(a), C = Cols(a);
  CUDA_CHECK(cuda::LaunchLayerNormForward(compute_, out.data, mean.as<float>(), rstd.as<float>(),
                                          residual.data, a.data, b.data, weight.data, bias.data, N,
                                          static_cast<int>(C), stream_));
  return Status::Ok();
}

Status CudaBackend::RunLayerNormBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor din_sums,
                                         Tensor dout, Tensor in, Tensor weight, Tensor mean,
                                         Tensor rstd) {
  const int64_t N = Rows(in), C = Cols(in);
  void* scratch = nullptr;
  TRAINER_RETURN_IF_ERROR(Scratch(
      cuda::LayerNormBackwardScratchFloats(N, static_cast<int>(C)) * sizeof(float), &scratch));
  CUDA_CHECK(
      cuda::LaunchLayerNormBackward(compute_, din.data, dweight.as<float>(), dbias.as<float>(),
                                    din_sums.empty() ? nullptr : din_sums.as<float>(), dout.data,
                                    in.data, weight.data, mean.as<float>(), rstd.as<float>(), N,
                                    static_cast<int>(C), static_cast<float*>(scratch), stream_));
  return Status::Ok();
}

// ---- matmul ----

namespace {

// y^T (OC,N) = W (C,OC)^T x^T (C,N) [+ bias]: the linear layer's forward GEMM, without output.
cuda::Gemm LinearForwardGemm(DType compute, const Tensor& in, const Tensor& weight,
                             const Tensor& bias) {
  cuda::Gemm g;
  g.transpose_a = true;
  g.m = Rows(weight);
  g.n = Rows(in);
  g.k = Cols(in);
  g.a = {weight.data, compute, g.k};
  g.b = {in.data, compute, g.k};
  g.d_dtype = compute;
  g.ldd = g.m;
  g.bias = bias.data;
  g.bias_dtype = compute;
  g.epilogue = bias.empty() ? cuda::GemmEpilogue::kNone : cuda::GemmEpilogue::kBias;
  return g;
}

// din^T (C,N) = W (C,OC) dout^T (OC,N), dout's rows ld_dout apart: the input gradient's GEMM.
cuda::Gemm InputGradientGemm(DType compute, const Tensor& weight, const void* dout,
                             int64_t ld_dout, void* din, int64_t N) {
  cuda::Gemm g;
  g.m = Cols(weight), g.n = N, g.k = Rows(weight);
  g.a = {weight.data, compute, g.m}, g.b = {dout, compute, ld_dout};
  g.d = din, g.d_dtype = compute, g.ldd = g.m;
  return g;
}

// dW^T (C,OC) = x^T (C,N) dout (N,OC) in f32, dout's rows ld_dout apart: the weight gradient's.
cuda::Gemm WeightGradientGemm(DType compute, const Tensor& in, const void* dout, int64_t ld_dout,
                              int64_t OC, void* dweight) {
  cuda::Gemm g;
  g.transpose_b = true;
  g.m = Cols(in), g.n = OC, g.k = Rows(in);
  g.a = {in.data, compute, g.m}, g.b = {dout, compute, ld_dout};
  g.d = dweight, g.d_dtype = DType::kF32, g.ldd = g.m;
  return g;
}

}  // namespace

Status CudaBackend::RunMatmulForwardAddResidual(Tensor out, Tensor in, Tensor weight, Tensor bias,
                                                Tensor residual) {
  cuda::Gemm g = LinearForwardGemm(compute_, in, weight, bias);
  g.d = out.data;
  g.c = residual.data;  // D = residual + W x (+ bias), rounded once
  g.beta = 1.f;
  bool supported = false;
  if (matmul_epilogues_) TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
  if (supported) return Status::Ok();
  return Backend::RunMatmulForwardAddResidual(out, in, weight, bias, residual);
}

Status CudaBackend::RunMatmulForward(Tensor out, Tensor pre_act, Tensor in, Tensor weight,
                                     Tensor bias, Activation act) {
  const char* op = "MatmulForward";
  const bool gelu = act == Activation::kGelu;
  const int64_t N = Rows(in), C = Cols(in), OC = Rows(weight);

  cuda::Gemm g = LinearForwardGemm(compute_, in, weight, bias);
  g.d_dtype = out.dtype;  // compute, or f32 (the MoE router's logits: no bias, no GELU)
  g.timed = !ragged_groups_;
  bool supported = false;
  // cuBLASLt wants the aux leading dimension divisible by 8.
  if (gelu && matmul_epilogues_ && OC % 8 == 0) {
    g.d = out.data;
    g.epilogue = bias.empty() ? cuda::GemmEpilogue::kGeluAux : cuda::GemmEpilogue::kGeluAuxBias;
    g.aux = pre_act.data;
    g.aux_ld = OC;
    cuda::GeluMatmulArgs args;
    args.out = out.data;
    args.pre = pre_act.data;
    args.in = in.data;
    args.weight = weight.data;
    args.bias = bias.empty() ? nullptr : bias.data;
    args.N = N, args.C = C, args.F = OC;
    bool fused = false;
    TRAINER_RETURN_IF_ERROR(FusedGeluMatmul(g, args, &fused));
    if (fused) return Status::Ok();
    TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
    if (supported) {
      ++counts_.gelu_epilogue;
      return Status::Ok();
    }
    g.aux = nullptr;
    g.aux_ld = 0;
  }
  g.d = gelu ? pre_act.data : out.data;
  g.epilogue = bias.empty() ? cuda::GemmEpilogue::kNone : cuda::GemmEpilogue::kBias;
  TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
  if (!supported)
    return OpError(op, StrFormat("cuBLASLt has no algorithm for (N,C)=(%lld,%lld) x (OC=%lld)",
                                 (long long)N, (long long)C, (long long)OC));
  if (gelu) {
    ++counts_.gelu_kernel;
    CUDA_CHECK(cuda::LaunchGeluForward(compute_, out.data, pre_act.data, N * OC, stream_));
  }
  return Status::Ok();
}

Status CudaBackend::RunMatmulBackward(Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                                      Tensor in, Tensor weight, GradientWrite dweight_write) {
  if (dout.dtype != compute_) {  // f32 (the MoE router's logits; no dbias): rounded to compute
    void* rounded = nullptr;
    TRAINER_RETURN_IF_ERROR(Scratch(dout.numel() * DTypeSize(compute_), &rounded));
    Tensor d(rounded, compute_, {Rows(dout), Cols(dout)});
    TRAINER_RETURN_IF_ERROR(RunConvert(d, dout));
    dout = d;
  }
  return MatmulBackwardImpl(din, dweight, dbias, dout, in, weight, Tensor(), Tensor(),
                            dweight_write);
}

Status CudaBackend::RunMatmulBackwardThroughGelu(Tensor din, Tensor dweight, Tensor dbias,
                                                 Tensor dout, Tensor in, Tensor weight,
                                                 Tensor gelu_pre_act, Tensor din_sums,
                                                 GradientWrite dweight_write) {
  return MatmulBackwardImpl(din, dweight, dbias, dout, in, weight, gelu_pre_act, din_sums,
                            dweight_write);
}

Status CudaBackend::MatmulBackwardImpl(Tensor din, Tensor dweight, Tensor dbias, Tensor dout,
                                       Tensor in, Tensor weight, Tensor gelu_pre_act,
                                       Tensor din_sums, GradientWrite dweight_write) {
  const char* op = gelu_pre_act.empty() ? "MatmulBackward" : "MatmulBackwardThroughGelu";
  const int64_t N = Rows(in), C = Cols(in), OC = Rows(weight);
  bool supported = false, din_summed = false;

  if (!din.empty()) {
    cuda::Gemm g = InputGradientGemm(compute_, weight, dout.data, OC, din.data, N);
    g.timed = !ragged_groups_;
    const bool gelu = !gelu_pre_act.empty();
    if (gelu && matmul_epilogues_) {  // din = GELU'(pre_act) * (W dout^T) in the GEMM's epilogue
      g.epilogue = cuda::GemmEpilogue::kDGelu;
      g.aux = gelu_pre_act.data;
      g.aux_ld = C;
      TRAINER_RETURN_IF_ERROR(
          FusedGeluBackward(g, din, dout, weight, gelu_pre_act, din_sums, &supported, &din_summed));
      if (!supported) {
        TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
        if (supported) ++counts_.gelu_epilogue;
      }
      g.epilogue = cuda::GemmEpilogue::kNone;
      g.aux = nullptr;
    }
    if (!supported) {
      TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
      if (!supported) return OpError(op, "cuBLASLt has no algorithm for din");
      if (gelu) {
        CUDA_CHECK(cuda::LaunchGeluBackward(compute_, din.data, din.data, gelu_pre_act.data, N * C,
                                            stream_));
        ++counts_.gelu_kernel;
      }
    }
  }
  if (!din_sums.empty() && !din_summed) {
    TRAINER_RETURN_IF_ERROR(AddColumnSums(din_sums.as<float>(), din.data, N, C, C, nullptr));
    if (!gelu_pre_act.empty()) ++counts_.din_sum_passes;
  }

  if (!dweight.empty()) {  // (+)=
    cuda::Gemm g = WeightGradientGemm(compute_, in, dout.data, OC, OC, dweight.data);
    g.beta = dweight_write == GradientWrite::kAccumulate ? 1.f : 0.f;
    g.timed = !ragged_groups_;
    TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
    if (!supported) return OpError(op, "cuBLASLt has no algorithm for dweight");
  }
  // The bias gradient by our own two-stage column sums, not cuBLASLt's BGRADB epilogue: that one
  // runs as a separate, slower pass over dout anyway (and forces split-K GEMMs with their own
  // reduction pass), and its sums would depend on the algorithm the GEMM's tuning picked.
  if (!dbias.empty())
    TRAINER_RETURN_IF_ERROR(AddColumnSums(dbias.as<float>(), dout.data, N, OC, OC, nullptr));
  return Status::Ok();
}

// The blocks' GEMMs read and write them in place: each block's first element and its matrix's
// row stride as the leading dimension (column-major: a block is (cols, N) with ld its width).
namespace {
const void* BlockStart(const ColumnBlock& b, DType dtype) {
  return static_cast<const char*>(b.whole.data) + b.first * DTypeSize(dtype);
}
void* BlockStart(ColumnBlock& b, DType dtype) {
  return static_cast<char*>(b.whole.data) + b.first * DTypeSize(dtype);
}
}  // namespace

Status CudaBackend::RunMatmulColumns(ColumnBlock out, GradientWrite out_write, ColumnBlock in,
                                     Tensor weight, Tensor bias, float alpha) {
  cuda::Gemm g = LinearForwardGemm(compute_, Tensor(nullptr, compute_, {in.rows(), in.cols}),
                                   weight, bias);
  g.b = {BlockStart(in, compute_), compute_, in.ld()};
  g.d = BlockStart(out, compute_);
  g.ldd = out.ld();
  g.alpha = alpha;
  g.beta = out_write == GradientWrite::kAccumulate ? 1.f : 0.f;  // rounded once
  bool supported = false;
  TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
  if (!supported) return OpError("MatmulColumns", "cuBLASLt has no algorithm for the blocks");
  return Status::Ok();
}

Status CudaBackend::RunMatmulBackwardColumns(ColumnBlock din, GradientWrite din_write,
                                             Tensor dweight, ColumnBlock dout, ColumnBlock in,
                                             Tensor weight, float alpha) {
  const char* op = "MatmulBackwardColumns";
  const int64_t N = dout.rows(), OC = dout.cols;
  const void* dcols = BlockStart(dout, compute_);
  bool supported = false;
  if (!din.whole.empty()) {  // (+)=
    cuda::Gemm g = InputGradientGemm(compute_, weight, dcols, dout.ld(), BlockStart(din, compute_),
                                     N);
    g.ldd = din.ld();
    g.alpha = alpha;
    g.beta = din_write == GradientWrite::kAccumulate ? 1.f : 0.f;
    TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
    if (!supported) return OpError(op, "cuBLASLt has no algorithm for din");
  }
  if (!dweight.empty()) {  // +=
    cuda::Gemm g = WeightGradientGemm(compute_, Tensor(nullptr, compute_, {N, in.cols}), dcols,
                                      dout.ld(), OC, dweight.data);
    g.a = {BlockStart(in, compute_), compute_, in.ld()};
    g.alpha = alpha;
    g.beta = 1.f;
    TRAINER_RETURN_IF_ERROR(matmul_->Run(g, &supported));
    if (!supported) return OpError(op, "cuBLASLt has no algorithm for dweight");
  }
  return Status::Ok();
}

// out (C) f32 += the (row-weighted) column sums of x: deterministic, two stages (partials per
// chunk of rows in scratch, then their fixed-order sum).
Status CudaBackend::AddColumnSums(float* out, const void* x, int64_t N, int64_t C, int64_t ld,
                                  const float* row_weights) {
  const int chunks = cuda::ColumnReductionChunks(N);
  void* scratch = nullptr;
  TRAINER_RETURN_IF_ERROR(Scratch(static_cast<size_t>(chunks) * C * sizeof(float), &scratch));
  float* partials = static_cast<float*>(scratch);
  CUDA_CHECK(cuda::LaunchColumnSumsPartial(compute_, partials, x, N, static_cast<int>(C), ld,
                                           row_weights, chunks, stream_));
  CUDA_CHECK(cuda::LaunchAddPartials({out}, partials, chunks, static_cast<int>(C), stream_));
  return Status::Ok();
}

Status CudaBackend::RunColumnSums(Tensor out, Tensor in, int64_t first_column, Tensor row_weights) {
  const int64_t N = Rows(in), C = Cols(in), W = out.numel();
  const char* first = static_cast<const char*>(in.data) + first_column * DTypeSize(compute_);
  return AddColumnSums(out.as<float>(), first, N, W, C,
                       row_weights.empty() ? nullptr : row_weights.as<float>());
}

Status CudaBackend::RunGeluForward(Tensor out, Tensor in) {
  const int64_t n = in.numel();
  CUDA_CHECK(cuda::LaunchGeluForward(compute_, out.data, in.data, n, stream_));
  return Status::Ok();
}

Status CudaBackend::RunGeluBackward(Tensor dx, Tensor dy, Tensor pre_act) {
  const int64_t n = pre_act.numel();
  CUDA_CHECK(cuda::LaunchGeluBackward(compute_, dx.data, dy.data, pre_act.data, n, stream_));
  return Status::Ok();
}

// ---- dropout (attention: cuda_backend_attention.cpp) ----

Status CudaBackend::RunDropout(Tensor out, Tensor in, Tensor residual, const DropoutKey& key) {
  CUDA_CHECK(cuda::LaunchDropout(compute_, out.data, in.data,
                                 residual.empty() ? nullptr : residual.data, Rows(in),
                                 static_cast<int>(Cols(in)), key, stream_));
  return Status::Ok();
}

// ---- cross-entropy ----

Status CudaBackend::RunCrossEntropyRowMax(Tensor row_max, Tensor logits, int vocab_start,
                                          int vocab_size) {
  const int64_t N = Rows(logits), V = Cols(logits);
  CUDA_CHECK(cuda::LaunchCrossEntropyRowMax(compute_, row_max.as<float>(), logits.data, N,
                                            static_cast<int>(V), vocab_start, vocab_size, stream_));
  return Status::Ok();
}

Status CudaBackend::RunCrossEntropySums(Tensor sums, Tensor logits, Tensor row_max, Tensor targets,
                                        int vocab_start, int vocab_size) {
  const int64_t N = Rows(logits), V = Cols(logits);
  CUDA_CHECK(cuda::LaunchCrossEntropySums(compute_, sums.as<float>(), logits.data,
                                          row_max.as<float>(), targets.as<int32_t>(), N,
                                          static_cast<int>(V), vocab_start, vocab_size, stream_));
  return Status::Ok();
}

Status CudaBackend::RunCrossEntropyBackward(Tensor losses, Tensor dlogits, Tensor logits,
                                            Tensor row_max, Tensor sums, Tensor targets,
                                            int vocab_start, int vocab_size, float dloss_scale) {
  const int64_t N = Rows(logits), V = Cols(logits);
  CUDA_CHECK(cuda::LaunchCrossEntropyBackward(compute_, losses.as<float>(), dlogits.data,
                                              logits.data, row_max.as<float>(), sums.as<float>(),
                                              targets.as<int32_t>(), N, static_cast<int>(V),
                                              vocab_start, vocab_size, dloss_scale, stream_));
  return Status::Ok();
}

Status CudaBackend::RunCrossEntropyFused(Tensor losses, Tensor dlogits, Tensor logits,
                                         Tensor row_max, Tensor sums, Tensor targets,
                                         int vocab_size, float dloss_scale) {
  const int64_t N = Rows(logits), V = Cols(logits);
  cudaError_t error = cudaSuccess;
  if (cuda::LaunchCrossEntropyFused(compute_, losses.as<float>(), dlogits.data, logits.data,
                                    targets.as<int32_t>(), N, static_cast<int>(V), vocab_size,
                                    dloss_scale, stream_, &error)) {
    CUDA_CHECK(error);
    return Status::Ok();
  }
  return Backend::RunCrossEntropyFused(losses, dlogits, logits, row_max, sums, targets, vocab_size,
                                       dloss_scale);
}

}  // namespace trainer
