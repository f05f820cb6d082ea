// GEMM + GELU on one GPU: cuBLASLt's epilogues (the trainer's route) against cuDNN's runtime-fused
// matmul graphs, at the MLP shapes of GPT-2 124M, 350M and the 1.3B config. Forward:
// pre = x W^T + b and out = GELU(pre) in one kernel. Backward: din = GELU'(pre) * (dout W), with
// and without the bias gradient (column sums of din) in the same graph. Every cuDNN plan is timed
// (events, after a warm-up); the result is checked against cuBLASLt's. cuBLASLt's epilogues are
// also timed with the weight stored the other way ("NN" forward, "TN" backward: does the other
// operand order get a faster kernel?). A third pair stores GELU's slope instead of pre: the
// forward writes GELU(pre) and GELU'(pre), the backward multiplies (dout W) by the stored slope
// (no GELU' in its epilogue). A fourth stores the activations feature-major ((F,N) row-major),
// for which cuBLASLt may choose another DGELU kernel; our own sm90 kernels (GELU forward, DGELU)
// follow cuBLASLt's routes.
// Prints one line per route.
//   gemm_gelu_fusion_bench [rows] [shape name filter, e.g. 350M] [quick: cuBLASLt and ours only]
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_check.h"
#include "common/tensor.h"
#include "model/cuda/back_to_back_timing.h"
#include "model/cuda/cudnn_graph.h"
#include "model/cuda/matmul.h"
#if defined(TRAINER_WITH_SM90_KERNELS)
#include "model/cuda/sm90/gemm_dgelu.h"
#include "model/cuda/sm90/gemm_gelu_forward.h"
#endif

namespace fe = cudnn_frontend;
using trainer::DType;
using trainer::cuda::Gemm;
using trainer::cuda::GemmEpilogue;

namespace {

struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  explicit Buffer(size_t n, size_t bytes_each = 2) : count(n) {
    BENCH_CHECK(cudaMalloc(&data, n * bytes_each) == cudaSuccess);
  }
  ~Buffer() { cudaFree(data); }
};

void FillRandomBF16(Buffer* b, float scale, uint32_t seed) {
  std::vector<uint16_t> host(b->count);
  uint32_t s = seed;
  for (auto& h : host) {
    s = s * 1664525u + 1013904223u;
    const float u = (s >> 8) * (1.f / 16777216.f) * 2.f - 1.f;
    h = trainer::FloatToBF16(u * scale);
  }
  BENCH_CHECK(cudaMemcpy(b->data, host.data(), host.size() * 2, cudaMemcpyHostToDevice) ==
              cudaSuccess);
}

std::vector<float> Download(const Buffer& b, size_t bytes_each = 2) {
  std::vector<float> out(b.count);
  if (bytes_each == 4) {
    BENCH_CHECK(cudaMemcpy(out.data(), b.data, b.count * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
  std::vector<uint16_t> host(b.count);
  BENCH_CHECK(cudaMemcpy(host.data(), b.data, b.count * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
  for (size_t i = 0; i < host.size(); ++i) out[i] = trainer::BF16ToFloat(host[i]);
  return out;
}

// The transpose of src, (rows, cols) column-major with ld rows, as a new (cols, rows) buffer
// with ld cols, made on the GPU by cuBLASLt's matrix transform.
std::unique_ptr<Buffer> Transposed(cublasLtHandle_t lt, cudaStream_t stream, const Buffer& src,
                                   int64_t rows, int64_t cols) {
  auto dst = std::make_unique<Buffer>(rows * cols);
  BENCH_CHECK(cudaMemset(dst->data, 0, rows * cols * 2) == cudaSuccess);  // B = dst, beta = 0
  cublasLtMatrixTransformDesc_t desc;
  cublasLtMatrixLayout_t in, out;
  const cublasOperation_t transpose = CUBLAS_OP_T;
  BENCH_CHECK(cublasLtMatrixTransformDescCreate(&desc, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  BENCH_CHECK(cublasLtMatrixTransformDescSetAttribute(desc, CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA,
                                                      &transpose,
                                                      sizeof(transpose)) == CUBLAS_STATUS_SUCCESS);
  BENCH_CHECK(cublasLtMatrixLayoutCreate(&in, CUDA_R_16BF, rows, cols, rows) ==
              CUBLAS_STATUS_SUCCESS);
  BENCH_CHECK(cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, cols, rows, cols) ==
              CUBLAS_STATUS_SUCCESS);
  const float one = 1.f, zero = 0.f;
  BENCH_CHECK(cublasLtMatrixTransform(lt, desc, &one, src.data, in, &zero, dst->data, out,
                                      dst->data, out, stream) == CUBLAS_STATUS_SUCCESS);
  BENCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  cublasLtMatrixLayoutDestroy(in);
  cublasLtMatrixLayoutDestroy(out);
  cublasLtMatrixTransformDescDestroy(desc);
  return dst;
}

// Milliseconds per run of `op` over `iterations` back-to-back runs, after a first run (which tunes
// a cuBLASLt GEMM) and 0.3 s of rest: timed right after its tuning's runs, cuBLASLt's GELU GEMMs
// took 4-18% longer than after a rest (gelu_route_power_bench).
double TimeMs(cudaStream_t stream, const std::function<bool()>& op, int iterations = 20) {
  if (!op() || cudaStreamSynchronize(stream) != cudaSuccess) return -1;
  usleep(300000);
  return trainer::cuda::TimeBackToBack(stream, op, iterations);
}

enum Uid : int64_t { kX = 1, kW, kBias, kPre, kOut, kDout, kDin, kDbias, kSlope, kOne, kConstants };

// TimeMs of one cuBLASLt GEMM (its first run tunes it).
double TimedLt(cudaStream_t stream, trainer::cuda::CublasLtMatmul* lt, const Gemm& g) {
  bool ok = false;
  return TimeMs(stream, [&] { return lt->Run(g, &ok).ok() && ok; });
}

// The trainer's graph helpers (model/cuda/cudnn_graph.h).
using trainer::cuda::GraphInput;
using trainer::cuda::NewBf16Graph;
using trainer::cuda::PointwiseF32;
using GraphPtr = trainer::cuda::CudnnGraphPtr;

// What the forward graph writes besides the plain product: pre only (a bias GEMM), pre and
// GELU(pre) (the trainer's route), or GELU(pre) and its slope GELU'(pre) (pre stays in the
// kernel), so that the backward multiplies by a stored slope instead of evaluating GELU'.
enum class ForwardOutputs { kPre, kPreAndGelu, kGeluAndSlope };

// pre (N,F) = x (N,C) W^T (C,F) + b, then the outputs above; feature_major stores pre and
// GELU(pre) as (F,N) row-major.
GraphPtr ForwardGraph(int64_t N, int64_t C, int64_t F, ForwardOutputs outputs,
                      bool feature_major = false) {
  const std::vector<int64_t> out_stride =
      feature_major ? std::vector<int64_t>{N * F, 1, N} : std::vector<int64_t>{N * F, F, 1};
  GraphPtr g = NewBf16Graph();
  auto x = GraphInput(g, "x", kX, {1, N, C}, {N * C, C, 1});
  auto w = GraphInput(g, "wT", kW, {1, C, F}, {C * F, 1, C});
  auto b = GraphInput(g, "bias", kBias, {1, 1, F}, {F, F, 1});
  auto mm = g->matmul(
      x, w,
      fe::graph::Matmul_attributes().set_name("mm").set_compute_data_type(fe::DataType_t::FLOAT));
  mm->set_data_type(fe::DataType_t::FLOAT);
  auto pre = g->pointwise(mm, b, PointwiseF32("bias", fe::PointwiseMode_t::ADD));
  if (outputs != ForwardOutputs::kGeluAndSlope)
    pre->set_output(true)
        .set_uid(kPre)
        .set_data_type(fe::DataType_t::BFLOAT16)
        .set_stride(out_stride);
  if (outputs == ForwardOutputs::kPre) return g;
  auto out = g->pointwise(pre, PointwiseF32("gelu", fe::PointwiseMode_t::GELU_APPROX_TANH_FWD));
  out->set_output(true)
      .set_uid(kOut)
      .set_data_type(fe::DataType_t::BFLOAT16)
      .set_stride(out_stride);
  if (outputs == ForwardOutputs::kGeluAndSlope) {
    auto one = GraphInput(g, "one", kOne, {1, 1, 1}, {1, 1, 1});  // (constants need cuDNN 9.22)
    auto slope =
        g->pointwise(one, pre, PointwiseF32("slope", fe::PointwiseMode_t::GELU_APPROX_TANH_BWD));
    slope->set_output(true).set_uid(kSlope).set_data_type(fe::DataType_t::BFLOAT16);
  }
  return g;
}

// The tanh-GELU slope written out in cuDNN's primitive pointwise ops (TANH_FWD, MUL, ADD, SUB)
// instead of its GELU_APPROX_TANH_BWD: with t = tanh(k x (1 + a x^2)),
// GELU'(x) = 0.5 (1 + t) + 0.5 k x (1 - t^2) (1 + 3a x^2). Constants are f32 (1,1,1) tensors at
// kConstants + i (cuDNN 9.19 has no graph constants): 1, 0.5, k, a, 3a.
constexpr float kSlopeConstants[5] = {1.f, 0.5f, 0.7978845608f, 0.044715f, 0.134145f};

std::shared_ptr<fe::graph::Tensor_attributes> SlopeOps(
    const GraphPtr& g, const std::shared_ptr<fe::graph::Tensor_attributes>& x) {
  std::shared_ptr<fe::graph::Tensor_attributes> c[5];
  for (int i = 0; i < 5; ++i) {
    c[i] = GraphInput(g, "c", kConstants + i, {1, 1, 1}, {1, 1, 1});
    c[i]->set_data_type(fe::DataType_t::FLOAT).set_name("c" + std::to_string(i));
  }
  using M = fe::PointwiseMode_t;
  auto op = [&](const std::shared_ptr<fe::graph::Tensor_attributes>& l,
                const std::shared_ptr<fe::graph::Tensor_attributes>& r, M mode) {
    auto o = g->pointwise(l, r, PointwiseF32("op", mode));
    o->set_data_type(fe::DataType_t::FLOAT);
    return o;
  };
  auto x2 = op(x, x, M::MUL);
  auto inner = op(op(op(op(x2, c[3], M::MUL), c[0], M::ADD), x, M::MUL), c[2], M::MUL);
  auto t = g->pointwise(inner, PointwiseF32("tanh", M::TANH_FWD));
  t->set_data_type(fe::DataType_t::FLOAT);
  auto one_plus_t = op(t, c[0], M::ADD);
  auto one_minus_t2 = op(c[0], op(t, t, M::MUL), M::SUB);
  auto r = op(op(x2, c[4], M::MUL), c[0], M::ADD);
  auto h = op(op(op(x, one_minus_t2, M::MUL), r, M::MUL), c[2], M::MUL);
  return op(op(one_plus_t, h, M::ADD), c[1], M::MUL);
}

// How the backward graph forms din from the product dout W: GELU' by cuDNN's
// GELU_APPROX_TANH_BWD (optionally with dbias, the column sums of din, in the same graph), by the
// primitive ops above, or a multiply by the slope GELU'(pre) that the forward stored.
enum class BackwardSlope { kDgelu, kDgeluAndDbias, kPrimitiveOps, kStored };

// din (N,F) = GELU'(pre) * (dout (N,C) W (C,F)), GELU'(pre) formed as `slope` says.
GraphPtr BackwardGraph(int64_t N, int64_t C, int64_t F, BackwardSlope slope) {
  GraphPtr g = NewBf16Graph();
  auto dout = GraphInput(g, "dout", kDout, {1, N, C}, {N * C, C, 1});
  auto w = GraphInput(g, "w", kW, {1, C, F}, {C * F, F, 1});
  auto mm = g->matmul(
      dout, w,
      fe::graph::Matmul_attributes().set_name("mm").set_compute_data_type(fe::DataType_t::FLOAT));
  mm->set_data_type(fe::DataType_t::FLOAT);
  std::shared_ptr<fe::graph::Tensor_attributes> din;
  if (slope == BackwardSlope::kStored) {
    auto stored = GraphInput(g, "slope", kSlope, {1, N, F}, {N * F, F, 1});
    din = g->pointwise(mm, stored, PointwiseF32("mul", fe::PointwiseMode_t::MUL));
  } else {
    auto pre = GraphInput(g, "pre", kPre, {1, N, F}, {N * F, F, 1});
    din = slope == BackwardSlope::kPrimitiveOps
              ? g->pointwise(mm, SlopeOps(g, pre), PointwiseF32("mul", fe::PointwiseMode_t::MUL))
              : g->pointwise(mm, pre,
                             PointwiseF32("dgelu", fe::PointwiseMode_t::GELU_APPROX_TANH_BWD));
  }
  din->set_output(true).set_uid(kDin).set_data_type(fe::DataType_t::BFLOAT16);
  if (slope == BackwardSlope::kDgeluAndDbias) {
    auto dbias = g->reduction(din, fe::graph::Reduction_attributes()
                                       .set_name("dbias")
                                       .set_mode(fe::ReductionMode_t::ADD)
                                       .set_compute_data_type(fe::DataType_t::FLOAT));
    dbias->set_output(true).set_uid(kDbias).set_data_type(fe::DataType_t::FLOAT).set_dim({1, 1, F});
  }
  return g;
}

bool quick = false;  // the third argument: cuDNN's graphs and the feature-major routes left out

struct CudnnRun {
  std::string best_name;
  double best_ms = -1;
  int plans = 0;
  int best_index = -1;
};

// Builds every plan of the graph, times each, leaves the best one's result in the outputs.
CudnnRun TimeGraph(const char* what, const GraphPtr& g, cudnnHandle_t handle, cudaStream_t stream,
                   std::unordered_map<int64_t, void*> pack) {
  CudnnRun r;
  if (quick) return r;
  fe::error_t e = g->validate();
  if (e.is_good()) e = g->build_operation_graph(handle);
  if (e.is_good()) e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (e.is_good()) e = g->check_support(handle);
  if (e.is_good()) e = g->build_plans(handle, fe::BuildPlanPolicy_t::ALL);
  if (!e.is_good()) {
    std::printf("  %-34s cuDNN: not supported (%s)\n", what, e.get_message().c_str());
    return r;
  }
  const int64_t count = g->get_execution_plan_count();
  for (int64_t i = 0; i < count; ++i) {
    int64_t ws_bytes = 0;
    if (!g->get_workspace_size_plan_at_index(i, ws_bytes).is_good()) continue;
    void* ws = nullptr;
    if (ws_bytes > 0 && cudaMalloc(&ws, ws_bytes) != cudaSuccess) continue;
    const double ms =
        TimeMs(stream, [&] { return g->execute_plan_at_index(handle, pack, ws, i).is_good(); });
    std::string name;
    if (!g->get_plan_name_at_index(i, name).is_good()) name = "?";
    cudaFree(ws);
    if (ms < 0) continue;
    ++r.plans;
    std::printf("    plan %2lld %-60s %8.3f ms\n", (long long)i, name.c_str(), ms);
    if (r.best_ms < 0 || ms < r.best_ms) r.best_ms = ms, r.best_name = name, r.best_index = (int)i;
  }
  if (r.best_index >= 0) {  // leave the best plan's results in the outputs
    int64_t ws_bytes = 0;
    void* ws = nullptr;
    BENCH_CHECK(g->get_workspace_size_plan_at_index(r.best_index, ws_bytes).is_good());
    BENCH_CHECK(ws_bytes == 0 || cudaMalloc(&ws, ws_bytes) == cudaSuccess);
    BENCH_CHECK(g->execute_plan_at_index(handle, pack, ws, r.best_index).is_good());
    cudaStreamSynchronize(stream);
    cudaFree(ws);
  }
  return r;
}

void Report(const char* what, double ms, double flops) {
  if (ms < 0) {
    std::printf("  %-34s (no result)\n", what);
    return;
  }
  std::printf("  %-34s %8.3f ms  %6.1f TFLOP/s\n", what, ms, flops / ms / 1e9);
}

// Activations stored feature-major ((F,N) row-major, column-major (N,F) for cuBLASLt): does
// cuBLASLt choose a faster DGELU kernel for din = dout (N,C) W_proj (C,F) as m = N, n = F?
// cuBLASLt's bias runs along m only, so this layout's forward is cuDNN's graph, whose outputs
// take any strides. pre is the row-major (N,F) pre-activation that the other routes use.
void RunFeatureMajor(int64_t N, int64_t C, cudaStream_t stream, cudnnHandle_t handle,
                     trainer::cuda::CublasLtMatmul* lt, cublasLtHandle_t raw, const Buffer& x,
                     const Buffer& w_fc, const Buffer& b_fc, const Buffer& pre, const Buffer& out,
                     const Buffer& dout, const Buffer& w_proj, const Buffer& din) {
  const int64_t F = 4 * C;
  const double flops = 2.0 * N * C * F;
  Buffer pre_fm(N * F), out_fm(N * F), din_fm(N * F);
  CudnnRun fwd = TimeGraph("cuDNN matmul+bias+GELU, feature-major",
                           ForwardGraph(N, C, F, ForwardOutputs::kPreAndGelu, true), handle, stream,
                           {{kX, x.data},
                            {kW, w_fc.data},
                            {kBias, b_fc.data},
                            {kPre, pre_fm.data},
                            {kOut, out_fm.data}});
  Report("cuDNN matmul+bias+GELU, f-major (best)", fwd.best_ms, flops);
  if (fwd.best_ms > 0)
    std::printf(
        "  check: pre %.2e, out %.2e (relative to cuBLASLt's, transposed)\n",
        bench::RelativeDiff(Download(*Transposed(raw, stream, pre_fm, N, F)), Download(pre)),
        bench::RelativeDiff(Download(*Transposed(raw, stream, out_fm, N, F)), Download(out)));
  const std::unique_ptr<Buffer> pre_t = Transposed(raw, stream, pre, F, N);
  Gemm bwd;
  bwd.transpose_a = bwd.transpose_b = true;
  bwd.m = N, bwd.n = F, bwd.k = C;
  bwd.a = {dout.data, DType::kBF16, C};
  bwd.b = {w_proj.data, DType::kBF16, F};
  bwd.d = din_fm.data;
  bwd.d_dtype = DType::kBF16;
  bwd.ldd = N;
  Report("cuBLASLt plain (din), feature-major", TimedLt(stream, lt, bwd), flops);
  Gemm dgelu = bwd;
  dgelu.epilogue = GemmEpilogue::kDGelu;
  dgelu.aux = pre_t->data;
  dgelu.aux_ld = N;
  Report("cuBLASLt DGELU, feature-major", TimedLt(stream, lt, dgelu), flops);
  BENCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  std::printf("  check: DGELU feature-major against NN %.2e (transposed)\n",
              bench::RelativeDiff(Download(*Transposed(raw, stream, din_fm, N, F)), Download(din)));
}

void RunShape(const char* label, int64_t N, int64_t C, cudaStream_t stream, cudnnHandle_t handle,
              trainer::cuda::CublasLtMatmul* lt, cublasLtHandle_t raw) {
  const int64_t F = 4 * C;
  const double flops = 2.0 * N * C * F;
  std::printf("%s: rows %lld, C %lld, F %lld\n", label, (long long)N, (long long)C, (long long)F);
  Buffer x(N * C), w_fc(F * C), b_fc(F), pre(N * F), out(N * F), pre2(N * F), out2(N * F);
  Buffer dout(N * C), w_proj(C * F), din(N * F), din2(N * F), dbias(F, 4);
  FillRandomBF16(&x, 1.f, 1);
  FillRandomBF16(&w_fc, 0.05f, 2);
  FillRandomBF16(&b_fc, 0.1f, 3);
  FillRandomBF16(&dout, 1.f, 4);
  FillRandomBF16(&w_proj, 0.05f, 5);

  // cuBLASLt, column-major: pre^T (F,N) = W (C,F)^T x^T (C,N).
  Gemm fwd;
  fwd.transpose_a = true;
  fwd.m = F, fwd.n = N, fwd.k = C;
  fwd.a = {w_fc.data, DType::kBF16, C};
  fwd.b = {x.data, DType::kBF16, C};
  fwd.d_dtype = DType::kBF16;
  fwd.ldd = F;
  fwd.bias = b_fc.data;
  Gemm plain = fwd;
  plain.d = pre.data;
  plain.epilogue = GemmEpilogue::kBias;
  Report("cuBLASLt bias", TimedLt(stream, lt, plain), flops);
  Gemm gelu = fwd;
  gelu.d = out.data;
  gelu.epilogue = GemmEpilogue::kGeluAuxBias;
  gelu.aux = pre.data;
  gelu.aux_ld = F;
  Report("cuBLASLt GELU_AUX_BIAS", TimedLt(stream, lt, gelu), flops);
  // The same with the weight stored transposed (W^T row-major: column-major (F,C), ld F), "NN".
  Buffer out_nn(N * F), pre_nn(N * F);
  const std::unique_ptr<Buffer> w_fc_t = Transposed(raw, stream, w_fc, C, F);
  Gemm fwd_nn = fwd;
  fwd_nn.transpose_a = false;
  fwd_nn.a = {w_fc_t->data, DType::kBF16, F};
  Gemm plain_nn = fwd_nn;
  plain_nn.d = pre_nn.data;
  plain_nn.epilogue = GemmEpilogue::kBias;
  Report("cuBLASLt bias, NN", TimedLt(stream, lt, plain_nn), flops);
  Gemm gelu_nn = fwd_nn;
  gelu_nn.d = out_nn.data;
  gelu_nn.epilogue = GemmEpilogue::kGeluAuxBias;
  gelu_nn.aux = pre_nn.data;
  gelu_nn.aux_ld = F;
  Report("cuBLASLt GELU_AUX_BIAS, NN", TimedLt(stream, lt, gelu_nn), flops);
#if defined(TRAINER_WITH_SM90_KERNELS)
  {  // ours (sm90/gemm_gelu_forward.cu): x (N,C), W_fc (F,C) as stored, bias
    Buffer pre_ours(N * F), out_ours(N * F);
    trainer::cuda::GemmGeluForwardProblem ours;
    ours.x = x.data, ours.w = w_fc.data, ours.bias = b_fc.data;
    ours.pre = pre_ours.data, ours.out = out_ours.data;
    ours.m = N, ours.n = F, ours.k = C;
    auto launch = [&] { return trainer::cuda::LaunchGemmGeluForward(ours, stream) == cudaSuccess; };
    if (trainer::cuda::GemmGeluForwardSupported(ours)) {
      Report("ours GELU forward (sm90)", TimeMs(stream, launch), flops);
      ours.cluster = 2;  // CTA pairs sharing W_fc's k-blocks by multicast
      if (trainer::cuda::GemmGeluForwardSupported(ours))
        Report("ours GELU forward (sm90), in CTA pairs", TimeMs(stream, launch), flops);
      BENCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      std::printf("  check: ours against cuBLASLt's GELU_AUX_BIAS: pre %.2e, out %.2e\n",
                  bench::RelativeDiff(Download(pre_ours), Download(pre)),
                  bench::RelativeDiff(Download(out_ours), Download(out)));
    }
  }
#endif
  cudaStreamSynchronize(stream);
  std::printf("  check: NN against TN: pre %.2e, out %.2e\n",
              bench::RelativeDiff(Download(pre_nn), Download(pre)),
              bench::RelativeDiff(Download(out_nn), Download(out)));

  CudnnRun plain_dnn =
      TimeGraph("cuDNN matmul+bias", ForwardGraph(N, C, F, ForwardOutputs::kPre), handle, stream,
                {{kX, x.data}, {kW, w_fc.data}, {kBias, b_fc.data}, {kPre, pre2.data}});
  Report("cuDNN matmul+bias (best plan)", plain_dnn.best_ms, flops);
  CudnnRun gelu_dnn = TimeGraph(
      "cuDNN matmul+bias+GELU", ForwardGraph(N, C, F, ForwardOutputs::kPreAndGelu), handle, stream,
      {{kX, x.data}, {kW, w_fc.data}, {kBias, b_fc.data}, {kPre, pre2.data}, {kOut, out2.data}});
  Report("cuDNN matmul+bias+GELU (best plan)", gelu_dnn.best_ms, flops);
  if (gelu_dnn.best_ms > 0)
    std::printf("  check: pre %.2e, out %.2e (relative to cuBLASLt)\n",
                bench::RelativeDiff(Download(pre2), Download(pre)),
                bench::RelativeDiff(Download(out2), Download(out)));

  Buffer slope(N * F), out3(N * F), one(1);
  const uint16_t one_bf16 = trainer::FloatToBF16(1.f);
  BENCH_CHECK(cudaMemcpy(one.data, &one_bf16, 2, cudaMemcpyHostToDevice) == cudaSuccess);
  CudnnRun slope_dnn =
      TimeGraph("cuDNN matmul+bias+GELU+slope",
                ForwardGraph(N, C, F, ForwardOutputs::kGeluAndSlope), handle, stream,
                {{kX, x.data},
                 {kW, w_fc.data},
                 {kBias, b_fc.data},
                 {kOut, out3.data},
                 {kSlope, slope.data},
                 {kOne, one.data}});
  Report("cuDNN matmul+bias+GELU+slope (best)", slope_dnn.best_ms, flops);
  if (slope_dnn.best_ms > 0) {  // the slope against GELU' of cuBLASLt's pre, on the host
    const std::vector<float> p = Download(pre);
    std::vector<float> want(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      const float x3 = p[i] * p[i] * p[i];
      const float t = std::tanh(0.7978845608f * (p[i] + 0.044715f * x3));
      want[i] = 0.5f * (1 + t) +
                0.5f * p[i] * (1 - t * t) * 0.7978845608f * (1 + 3 * 0.044715f * p[i] * p[i]);
    }
    std::printf("  check: out %.2e, slope %.2e (relative to cuBLASLt's, GELU' on the host)\n",
                bench::RelativeDiff(Download(out3), Download(out)),
                bench::RelativeDiff(Download(slope), want));
  }

  // Backward: din^T (F,N) = W_proj^T... column-major: din^T (F,N) = Wp (F,C) dout^T (C,N), where
  // the row-major W_proj (C,F) is Wp column-major (F,C) with ld F.
  Gemm bwd;
  bwd.m = F, bwd.n = N, bwd.k = C;
  bwd.a = {w_proj.data, DType::kBF16, F};
  bwd.b = {dout.data, DType::kBF16, C};
  bwd.d = din.data;
  bwd.d_dtype = DType::kBF16;
  bwd.ldd = F;
  Report("cuBLASLt plain (din)", TimedLt(stream, lt, bwd), flops);
  Gemm dgelu = bwd;
  dgelu.epilogue = GemmEpilogue::kDGelu;
  dgelu.aux = pre.data;
  dgelu.aux_ld = F;
  Report("cuBLASLt DGELU", TimedLt(stream, lt, dgelu), flops);
  // The same with W_proj stored transposed (column-major (C,F), ld C; row-major (F,C)), "TN".
  Buffer din_tn(N * F);
  const std::unique_ptr<Buffer> w_proj_t = Transposed(raw, stream, w_proj, F, C);
  Gemm bwd_tn = bwd;
  bwd_tn.transpose_a = true;
  bwd_tn.a = {w_proj_t->data, DType::kBF16, C};
  bwd_tn.d = din_tn.data;
  Report("cuBLASLt plain (din), TN", TimedLt(stream, lt, bwd_tn), flops);
  Gemm dgelu_tn = bwd_tn;
  dgelu_tn.epilogue = GemmEpilogue::kDGelu;
  dgelu_tn.aux = pre.data;
  dgelu_tn.aux_ld = F;
  Report("cuBLASLt DGELU, TN", TimedLt(stream, lt, dgelu_tn), flops);
  cudaStreamSynchronize(stream);
  std::printf("  check: DGELU TN against NN %.2e\n",
              bench::RelativeDiff(Download(din_tn), Download(din)));
  if (!quick)
    RunFeatureMajor(N, C, stream, handle, lt, raw, x, w_fc, b_fc, pre, out, dout, w_proj, din);
#if defined(TRAINER_WITH_SM90_KERNELS)
  {  // ours (sm90/gemm_dgelu.cu), on W_proj (C,F) as stored (N-major)
    Buffer din_ours(N * F);
    trainer::cuda::GemmDgeluProblem ours;
    ours.dout = dout.data, ours.w = w_proj.data, ours.pre = pre.data, ours.din = din_ours.data;
    ours.m = N, ours.n = F, ours.k = C;
    if (trainer::cuda::GemmDgeluSupported(ours)) {
      auto launch = [&] { return trainer::cuda::LaunchGemmDgelu(ours, stream) == cudaSuccess; };
      Report("ours DGELU (sm90)", TimeMs(stream, launch), flops);
      Report("the same, timed over 3 runs", TimeMs(stream, launch, 3), flops);  // as the trainer
      // The other variants: 1-4 of a tile's boxes' slopes in the epilogue (their din is the same).
      for (int boxes = 1; boxes <= 4; ++boxes) {
        ours.epilogue_slope_boxes = boxes;
        Report(("ours DGELU, " + std::to_string(boxes) + " of 4 boxes' slopes in the epilogue")
                   .c_str(),
               TimeMs(stream, launch), flops);
      }
      // In CTA pairs sharing W_proj's k-blocks by multicast, 0-2 boxes in the epilogue.
      std::printf("  ours DGELU: %d CTAs alone", trainer::cuda::GemmDgeluGridSize(ours));
      ours.cluster = 2;
      std::printf(", %d in CTA pairs\n", trainer::cuda::GemmDgeluGridSize(ours));
      for (int boxes = 0; boxes <= 2 && trainer::cuda::GemmDgeluSupported(ours); ++boxes) {
        ours.epilogue_slope_boxes = boxes;
        Report(("ours DGELU in CTA pairs, " + std::to_string(boxes) + " of 4 boxes in the epilogue")
                   .c_str(),
               TimeMs(stream, launch), flops);
      }
      BENCH_CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
      std::printf("  check: ours against cuBLASLt's DGELU %.2e\n",
                  bench::RelativeDiff(Download(din_ours), Download(din)));
      // With din's column sums per 128 rows (fc's bias gradient), summed by the spare warps from
      // the tile in shared memory or by the multipliers as they form din; alone, 0-2 boxes.
      Buffer partials(N / 128 * F, 4);
      ours.column_partials = partials.data;
      ours.cluster = 1;
      for (bool in_epilogue : {false, true}) {
        ours.sums_in_epilogue = in_epilogue;
        for (int boxes = 0; boxes <= 2; ++boxes) {
          ours.epilogue_slope_boxes = boxes;
          Report(("ours DGELU + column sums " +
                  std::string(in_epilogue ? "in the epilogue" : "by the spare warps") + ", " +
                  std::to_string(boxes) + " of 4 boxes in the epilogue")
                     .c_str(),
                 TimeMs(stream, launch), flops);
        }
      }
    }
  }
#endif
  CudnnRun dgelu_dnn =
      TimeGraph("cuDNN matmul+dGELU", BackwardGraph(N, C, F, BackwardSlope::kDgelu), handle, stream,
                {{kDout, dout.data}, {kW, w_proj.data}, {kPre, pre.data}, {kDin, din2.data}});
  Report("cuDNN matmul+dGELU (best plan)", dgelu_dnn.best_ms, flops);
  if (dgelu_dnn.best_ms > 0)
    std::printf("  check: din %.2e\n", bench::RelativeDiff(Download(din2), Download(din)));
  if (slope_dnn.best_ms > 0) {
    Buffer din3(N * F);
    CudnnRun mul_dnn = TimeGraph(
        "cuDNN matmul*slope", BackwardGraph(N, C, F, BackwardSlope::kStored), handle, stream,
        {{kDout, dout.data}, {kW, w_proj.data}, {kSlope, slope.data}, {kDin, din3.data}});
    Report("cuDNN matmul*slope (best plan)", mul_dnn.best_ms, flops);
    if (mul_dnn.best_ms > 0)
      std::printf("  check: din %.2e\n", bench::RelativeDiff(Download(din3), Download(din)));
  }
  {
    Buffer din4(N * F), constants(5 * 4, 4);  // one 16-byte slot per constant
    std::vector<float> slots(5 * 4, 0.f);
    for (int i = 0; i < 5; ++i) slots[4 * i] = kSlopeConstants[i];
    BENCH_CHECK(cudaMemcpy(constants.data, slots.data(), slots.size() * 4,
                           cudaMemcpyHostToDevice) == cudaSuccess);
    std::unordered_map<int64_t, void*> pack = {
        {kDout, dout.data}, {kW, w_proj.data}, {kPre, pre.data}, {kDin, din4.data}};
    for (int i = 0; i < 5; ++i) pack[kConstants + i] = static_cast<float*>(constants.data) + 4 * i;
    CudnnRun ops_dnn =
        TimeGraph("cuDNN matmul+dGELU as ops", BackwardGraph(N, C, F, BackwardSlope::kPrimitiveOps),
                  handle, stream, pack);
    Report("cuDNN matmul+dGELU as ops (best plan)", ops_dnn.best_ms, flops);
    if (ops_dnn.best_ms > 0)
      std::printf("  check: din %.2e\n", bench::RelativeDiff(Download(din4), Download(din)));
  }
  CudnnRun dbias_dnn =
      TimeGraph("cuDNN matmul+dGELU+dbias", BackwardGraph(N, C, F, BackwardSlope::kDgeluAndDbias),
                handle, stream,
                {{kDout, dout.data},
                 {kW, w_proj.data},
                 {kPre, pre.data},
                 {kDin, din2.data},
                 {kDbias, dbias.data}});
  Report("cuDNN matmul+dGELU+dbias (best plan)", dbias_dnn.best_ms, flops);
  if (dbias_dnn.best_ms > 0) {
    const std::vector<float> d = Download(din), db = Download(dbias, 4);
    std::vector<float> want(F, 0.f);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < F; ++c) want[c] += d[r * F + c];
    std::printf("  check: din %.2e, dbias %.2e\n", bench::RelativeDiff(Download(din2), d),
                bench::RelativeDiff(db, want));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 32768;
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  cudnnHandle_t handle;
  BENCH_CHECK(cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS);
  BENCH_CHECK(cudnnSetStream(handle, stream) == CUDNN_STATUS_SUCCESS);
  std::unique_ptr<trainer::cuda::CublasLtMatmul> lt;
  BENCH_CHECK(trainer::cuda::CublasLtMatmul::Create(stream, &lt).ok());
  cublasLtHandle_t raw;  // for the transposes of the feature-major routes
  BENCH_CHECK(cublasLtCreate(&raw) == CUBLAS_STATUS_SUCCESS);
  std::printf("cuDNN %zu, frontend %d\n", cudnnGetVersion(), CUDNN_FRONTEND_VERSION);
  const std::string only = argc > 2 ? argv[2] : "";
  quick = argc > 3 && std::string(argv[3]) == "quick";
  auto run = [&](const char* label, int64_t N, int64_t C) {
    if (only.empty() || std::string(label).find(only) != std::string::npos)
      RunShape(label, N, C, stream, handle, lt.get(), raw);
  };
  run("GPT-2 124M MLP", rows, 768);
  run("GPT-2 350M MLP", rows / 2, 1024);
  run("GPT 1.3B MLP", rows, 2048);
  cublasLtDestroy(raw);
  cudnnDestroy(handle);
  return 0;
}
