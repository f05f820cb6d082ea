// CudaBackend's routes for the MLP's two GELU GEMMs (the op tier picks them in
// cuda_backend_layers.cpp): the forward pre = x W_fc^T + bias, out = GELU(pre) by cuBLASLt's
// GELU_AUX_BIAS epilogue, cuDNN's fused graph or our sm90 kernel, and the GELU-gradient GEMM
// din = GELU'(pre) * (dout W_proj) by cuBLASLt's DGELU epilogue or our sm90 kernel. Each shape's
// route is chosen from the times of its own calls in the run's first step (route_trial.h).
#include <memory>
#include <string>

#include "common/log.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/kernels.h"
#include "model/cuda/matmul.h"
#include "model/cuda/matmul_gelu_cudnn.h"
#include "model/cuda/op_checks.h"
#if defined(TRAINER_WITH_SM90_KERNELS)
#include "model/cuda/sm90/gemm_dgelu.h"
#include "model/cuda/sm90/gemm_gelu_forward.h"
#endif

namespace trainer {

namespace {

#if defined(TRAINER_WITH_SM90_KERNELS)
// Our sm90 kernels (they need sm_90a code): whether each runs a problem (alone or in clusters of
// `cluster` CTAs), and its launch.
cuda::GemmGeluForwardProblem Sm90GeluProblem(const cuda::GeluMatmulArgs& args, int cluster) {
  cuda::GemmGeluForwardProblem p;
  p.x = args.in, p.w = args.weight, p.bias = args.bias, p.pre = args.pre, p.out = args.out;
  p.m = args.N, p.n = args.F, p.k = args.C;
  p.cluster = cluster;
  return p;
}
bool Sm90GeluRuns(const cuda::GeluMatmulArgs& args, int cluster) {
  return cuda::GemmGeluForwardSupported(Sm90GeluProblem(args, cluster));
}
cudaError_t Sm90GeluLaunch(const cuda::GeluMatmulArgs& args, int cluster, cudaStream_t stream) {
  return cuda::LaunchGemmGeluForward(Sm90GeluProblem(args, cluster), stream);
}
using Sm90DgeluProblem = cuda::GemmDgeluProblem;
bool Sm90DgeluRuns(const Sm90DgeluProblem& p) {
  return cuda::GemmDgeluSupported(p);
}
cudaError_t Sm90DgeluLaunch(const Sm90DgeluProblem& p, cudaStream_t stream) {
  return cuda::LaunchGemmDgelu(p, stream);
}
#else
bool Sm90GeluRuns(const cuda::GeluMatmulArgs&, int) {
  return false;
}
cudaError_t Sm90GeluLaunch(const cuda::GeluMatmulArgs&, int, cudaStream_t) {
  return cudaErrorNotSupported;
}
struct Sm90DgeluProblem {
  const void *dout = nullptr, *w = nullptr, *pre = nullptr;
  void *din = nullptr, *column_partials = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int epilogue_slope_boxes = 0;
  int cluster = 1;
};
bool Sm90DgeluRuns(const Sm90DgeluProblem&) {
  return false;
}
cudaError_t Sm90DgeluLaunch(const Sm90DgeluProblem&, cudaStream_t) {
  return cudaErrorNotSupported;
}
#endif

// Timed calls of each candidate in a shape's trial (route_trial.h).
constexpr int kTrialsEach = 4;
// Our GELU-gradient kernel's variants: 0, 1 or 2 of a tile's four boxes' slopes in its epilogue,
// alone and in CTA pairs (clusters of two sharing the weight's k-blocks).
constexpr int kDgeluSlopeSplits = 3;
constexpr int kDgeluVariants = 2 * kDgeluSlopeSplits;

}  // namespace

Status CudaBackend::FusedGeluMatmul(const cuda::Gemm& gemm, const cuda::GeluMatmulArgs& args,
                                    bool* done) {
  *done = false;
  if (compute_ != DType::kBF16) return Status::Ok();
  const auto key = std::make_tuple(args.N, args.C, args.F, args.bias != nullptr);
  auto it = gelu_routes_.find(key);
  if (it == gelu_routes_.end()) {  // the shape's first call: who can run it
    const bool cudnn_runs = cudnn_gelu_matmul_ != nullptr;
    const bool sm90_runs = Sm90GeluRuns(args, 1);
    const bool sm90_pairs_run = Sm90GeluRuns(args, 2);
    GeluForwardRoute route;
    if (gelu_route_ == GeluMatmulRoute::kFastest || gelu_route_ == GeluMatmulRoute::kCublasLt)
      route.candidates.push_back(GeluGemmChoice::kCublasLt);
    if (cudnn_runs &&
        (gelu_route_ == GeluMatmulRoute::kFastest || gelu_route_ == GeluMatmulRoute::kCudnn))
      route.candidates.push_back(GeluGemmChoice::kCudnn);
    if (gelu_route_ == GeluMatmulRoute::kFastest || gelu_route_ == GeluMatmulRoute::kSm90) {
      if (sm90_runs) route.candidates.push_back(GeluGemmChoice::kSm90);
      if (sm90_pairs_run) route.candidates.push_back(GeluGemmChoice::kSm90Pairs);
    }
    if (route.candidates.empty()) route.candidates.push_back(GeluGemmChoice::kCublasLt);
    route.trial =
        std::make_unique<cuda::RouteTrial>(static_cast<int>(route.candidates.size()), kTrialsEach);
    it = gelu_routes_.emplace(key, std::move(route)).first;
  }
  GeluForwardRoute& route = it->second;
  Status cudnn_status;
  auto run = [&](int c) -> bool {
    bool ran = false;
    switch (route.candidates[c]) {
      case GeluGemmChoice::kCublasLt:
        return matmul_->Run(gemm, &ran).ok() && ran;
      case GeluGemmChoice::kCudnn:
        cudnn_status = cudnn_gelu_matmul_->Run(args, &ran);
        return cudnn_status.ok() && ran;
      case GeluGemmChoice::kSm90:
        return Sm90GeluLaunch(args, 1, stream_) == cudaSuccess;
      case GeluGemmChoice::kSm90Pairs:
        return Sm90GeluLaunch(args, 2, stream_) == cudaSuccess;
    }
    return false;
  };
  cuda::RouteTrial::CallResult call;
  TRAINER_RETURN_IF_ERROR(route.trial->Call(stream_, run, &call));
  TRAINER_RETURN_IF_ERROR(cudnn_status);
  if (call.decided_now && route.candidates.size() > 1) {
    const char* names[] = {"cuBLASLt epilogue", "cuDNN fused graph", "sm90 kernel",
                           "sm90 kernel in CTA pairs"};
    std::string times;
    for (int c = 0; c < route.trial->candidates(); ++c)
      times += StrFormat("%s%s %s", c > 0 ? ", " : "", names[static_cast<int>(route.candidates[c])],
                         route.trial->refused(c)
                             ? "refused"
                             : StrFormat("%.3f ms", route.trial->mean_ms(c)).c_str());
    const int choice = route.trial->choice();
    LogInfo(StrFormat(
        "GELU GEMM (%lld x %lld -> %lld), %d calls each in turn: %s; using %s", (long long)args.N,
        (long long)args.C, (long long)args.F, kTrialsEach, times.c_str(),
        choice < 0 ? "none (unfused)" : names[static_cast<int>(route.candidates[choice])]));
  }
  if (call.refused) {
    CUDA_CHECK(cudaGetLastError());
    return cuda::OpError("MatmulForward",
                         StrFormat("the GELU GEMM's route (%d) was refused after it had run",
                                   static_cast<int>(route.candidates[call.output])));
  }
  if (call.output < 0) return Status::Ok();  // no fused route runs the shape
  *done = true;
  switch (route.candidates[call.output]) {
    case GeluGemmChoice::kCublasLt:
      ++counts_.gelu_epilogue;
      break;
    case GeluGemmChoice::kCudnn:
      ++counts_.gelu_cudnn;
      break;
    case GeluGemmChoice::kSm90:
    case GeluGemmChoice::kSm90Pairs:
      ++counts_.gelu_sm90;
      break;
  }
  return Status::Ok();
}

Status CudaBackend::FusedGeluBackward(const cuda::Gemm& gemm, Tensor din, Tensor dout,
                                      Tensor weight, Tensor pre_act, Tensor din_sums, bool* done,
                                      bool* sums_done) {
  *done = *sums_done = false;
  if (compute_ != DType::kBF16 || gelu_route_ == GeluMatmulRoute::kCublasLt ||
      gelu_route_ == GeluMatmulRoute::kCudnn)
    return Status::Ok();
  // din (N,F) = GELU'(pre_act) * (dout (N,OC) weight (OC,F)), the weight as stored (N-major for
  // the kernel). `gemm` is cuBLASLt's din^T (F,N) = W dout^T with DGELU.
  const int64_t N = gemm.n, F = gemm.m, OC = gemm.k;
  // din's column sums inside the kernel: (N/128, F) partials in the scratch, where they fit in
  // what it holds from the start (so that the memory plan stays exact); else their own pass.
  const int64_t partial_rows = N / 128;
  const bool sums = !din_sums.empty() &&
                    static_cast<size_t>(partial_rows * F) * sizeof(float) <= kInitialScratchBytes;
  const auto key = std::make_tuple(N, F, OC, sums);
  Sm90DgeluProblem p;
  p.dout = dout.data, p.w = weight.data, p.pre = pre_act.data, p.din = din.data;
  p.m = N, p.n = F, p.k = OC;
  if (sums) TRAINER_RETURN_IF_ERROR(Scratch(kInitialScratchBytes, &p.column_partials));
  auto it = dgelu_routes_.find(key);
  if (it == dgelu_routes_.end()) {
    DgeluRoute route;
    route.with_cublaslt = gelu_route_ == GeluMatmulRoute::kFastest;
    // Our kernel not for this shape: no trial, cuBLASLt's route (the caller's).
    const int candidates = Sm90DgeluRuns(p) ? (route.with_cublaslt ? 1 : 0) + kDgeluVariants : 0;
    if (candidates > 0) route.trial = std::make_unique<cuda::RouteTrial>(candidates, kTrialsEach);
    it = dgelu_routes_.emplace(key, std::move(route)).first;
  }
  DgeluRoute& route = it->second;
  if (route.trial == nullptr) return Status::Ok();
  // Candidate c: cuBLASLt's DGELU, with the first stage of the column sums that would follow it
  // (the caller's pass then sums din again); or ours, variant c - first_ours. (Both routes'
  // second stage, a short pass over partial sums, is not timed.)
  const int first_ours = route.with_cublaslt ? 1 : 0;
  auto run = [&](int c) -> bool {
    if (c >= first_ours) {
      p.epilogue_slope_boxes = (c - first_ours) % kDgeluSlopeSplits;
      p.cluster = 1 + (c - first_ours) / kDgeluSlopeSplits;
      return Sm90DgeluLaunch(p, stream_) == cudaSuccess;
    }
    bool ran = false;
    return matmul_->Run(gemm, &ran).ok() && ran &&
           (!sums ||
            cuda::LaunchColumnSumsPartial(compute_, static_cast<float*>(p.column_partials),
                                          din.data, N, static_cast<int>(F), F, nullptr,
                                          cuda::ColumnReductionChunks(N), stream_) == cudaSuccess);
  };
  cuda::RouteTrial::CallResult call;
  TRAINER_RETURN_IF_ERROR(route.trial->Call(stream_, run, &call));
  const cuda::RouteTrial& trial = *route.trial;
  if (call.decided_now && trial.candidates() > 1) {
    auto shown = [&](int c) {
      return trial.refused(c) ? std::string("refused") : StrFormat("%.3f ms", trial.mean_ms(c));
    };
    std::string times =
        route.with_cublaslt
            ? StrFormat("cuBLASLt DGELU%s %s, ", sums ? " + column sums" : "", shown(0).c_str())
            : std::string();
    times += StrFormat(
        "sm90 kernel %s / %s / %s, in CTA pairs %s / %s / %s (0 / 1 / 2 of a tile's 4 boxes' "
        "slopes in its epilogue)",
        shown(first_ours).c_str(), shown(first_ours + 1).c_str(), shown(first_ours + 2).c_str(),
        shown(first_ours + 3).c_str(), shown(first_ours + 4).c_str(),
        shown(first_ours + 5).c_str());
    const int choice = trial.choice();
    LogInfo(
        StrFormat("GELU-gradient GEMM (%lld x %lld -> %lld%s), %d calls each in turn: %s; using %s",
                  (long long)N, (long long)OC, (long long)F, sums ? ", with din's column sums" : "",
                  kTrialsEach, times.c_str(),
                  choice < first_ours
                      ? "cuBLASLt"
                      : StrFormat("sm90 kernel (%d%s)", (choice - first_ours) % kDgeluSlopeSplits,
                                  choice - first_ours >= kDgeluSlopeSplits ? ", in CTA pairs" : "")
                            .c_str()));
  }
  if (call.refused) {
    CUDA_CHECK(cudaGetLastError());
    return cuda::OpError("MatmulBackward", call.output < first_ours
                                               ? "cuBLASLt's DGELU GEMM was refused"
                                               : "the sm90 GELU-gradient kernel was refused");
  }
  if (call.output < 0) return Status::Ok();  // every candidate refused: the caller's route
  *done = true;
  if (call.output < first_ours) {  // cuBLASLt's DGELU ran here; the caller sums din
    ++counts_.gelu_epilogue;
    return Status::Ok();
  }
  ++counts_.dgelu_sm90;
  if (sums) {
    CUDA_CHECK(cuda::LaunchAddPartials(
        {din_sums.as<float>()}, static_cast<const float*>(p.column_partials),
        static_cast<int>(partial_rows), static_cast<int>(F), stream_));
    *sums_done = true;
  }
  return Status::Ok();
}

}  // namespace trainer
