// CudaBackend's routes for the MLP's two GELU GEMMs (the op tier picks them in
// cuda_backend_layers.cpp): the forward pre = x W_fc^T + bias, out = GELU(pre) by cuBLASLt's
// GELU_AUX_BIAS epilogue, cuDNN's fused graph or our sm90 kernel, and the GELU-gradient GEMM
// din = GELU'(pre) * (dout W_proj) by cuBLASLt's DGELU epilogue or our sm90 kernel. Each shape's
// route is timed on its first call and kept for the run.
#include <algorithm>

#include "common/log.h"
#include "model/cuda/back_to_back_timing.h"
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
// Our sm90 kernels (they need sm_90a code): whether each runs a problem, and its launch.
cuda::GemmGeluForwardProblem Sm90GeluProblem(const cuda::GeluMatmulArgs& args) {
  cuda::GemmGeluForwardProblem p;
  p.x = args.in, p.w = args.weight, p.bias = args.bias, p.pre = args.pre, p.out = args.out;
  p.m = args.N, p.n = args.F, p.k = args.C;
  return p;
}
bool Sm90GeluRuns(const cuda::GeluMatmulArgs& args) {
  return cuda::GemmGeluForwardSupported(Sm90GeluProblem(args));
}
cudaError_t Sm90GeluLaunch(const cuda::GeluMatmulArgs& args, cudaStream_t stream) {
  return cuda::LaunchGemmGeluForward(Sm90GeluProblem(args), stream);
}
using Sm90DgeluProblem = cuda::GemmDgeluProblem;
bool Sm90DgeluRuns(const Sm90DgeluProblem& p) {
  return cuda::GemmDgeluSupported(p);
}
cudaError_t Sm90DgeluLaunch(const Sm90DgeluProblem& p, cudaStream_t stream) {
  return cuda::LaunchGemmDgelu(p, stream);
}
#else
bool Sm90GeluRuns(const cuda::GeluMatmulArgs&) {
  return false;
}
cudaError_t Sm90GeluLaunch(const cuda::GeluMatmulArgs&, cudaStream_t) {
  return cudaErrorNotSupported;
}
struct Sm90DgeluProblem {
  const void *dout = nullptr, *w = nullptr, *pre = nullptr;
  void *din = nullptr, *column_partials = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int epilogue_slope_boxes = 0;
};
bool Sm90DgeluRuns(const Sm90DgeluProblem&) {
  return false;
}
cudaError_t Sm90DgeluLaunch(const Sm90DgeluProblem&, cudaStream_t) {
  return cudaErrorNotSupported;
}
#endif

// A route's timing on a shape's first call: kTimedRuns back-to-back runs behind an untimed one,
// in each of kTimingRounds rounds that take the routes in turn; a route's time is its fastest
// round's. (The first route timed in a round follows the last one's runs, and the first round
// follows cuBLASLt's tuning: rounds in turn keep one route from always running on a cooler GPU.)
constexpr int kTimedRuns = 3;
constexpr int kTimingRounds = 2;

// A route's time over rounds: the faster of its best so far and this round's; a failed round
// (<= 0) fails the route.
float Faster(int round, float best_ms, float round_ms) {
  if (round == 0) return round_ms;
  return best_ms <= 0 || round_ms <= 0 ? -1.f : std::min(best_ms, round_ms);
}

// Milliseconds per run of cuBLASLt's GEMM `gemm` (its first run tunes it); -1 when it fails.
float TimeCublasLt(cuda::CublasLtMatmul* matmul, const cuda::Gemm& gemm, cudaStream_t stream) {
  return cuda::TimeBackToBack(
      stream,
      [&] {
        bool ran = false;
        return matmul->Run(gemm, &ran).ok() && ran;
      },
      kTimedRuns);
}

// The GELU-gradient GEMM's candidates: cuBLASLt's DGELU (where the route may take it) and our
// kernel with 0, 1 or 2 of a tile's four boxes' slopes in its epilogue; each timed over
// kDgeluTrials calls of the run's first step.
constexpr int kDgeluVariants = 3;
constexpr int kDgeluTrials = 4;

}  // namespace

Status CudaBackend::FusedGeluMatmul(const cuda::Gemm& gemm, const cuda::GeluMatmulArgs& args,
                                    bool* done) {
  *done = false;
  if (compute_ != DType::kBF16 || gelu_route_ == GeluMatmulRoute::kCublasLt) return Status::Ok();
  const auto key = std::make_tuple(args.N, args.C, args.F, args.bias != nullptr);
  auto it = gelu_choice_.find(key);
  if (it == gelu_choice_.end()) {  // the shape's first call: who can run it, and who runs it
    const bool cudnn_runs = cudnn_gelu_matmul_ != nullptr;
    const bool sm90_runs = Sm90GeluRuns(args);
    GeluGemmChoice choice = GeluGemmChoice::kCublasLt;
    if (gelu_route_ == GeluMatmulRoute::kCudnn && cudnn_runs) choice = GeluGemmChoice::kCudnn;
    if (gelu_route_ == GeluMatmulRoute::kSm90 && sm90_runs) choice = GeluGemmChoice::kSm90;
    if (gelu_route_ == GeluMatmulRoute::kFastest) {
      // cuBLASLt's time (its first run tunes it), cuDNN's fastest plan's, then ours, in rounds;
      // the outputs hold the last one's result, and the caller runs cuBLASLt again when it wins.
      // cuDNN's first run picks its plan and gives that plan's time; later rounds time the plan.
      auto time_cudnn = [&](int round, float* ms) -> Status {
        bool supported = false;
        if (round == 0) {
          TRAINER_RETURN_IF_ERROR(cudnn_gelu_matmul_->Run(args, &supported, ms));
        } else {
          *ms = cuda::TimeBackToBack(
              stream_, [&] { return cudnn_gelu_matmul_->Run(args, &supported).ok() && supported; },
              kTimedRuns);
        }
        if (!supported) *ms = -1.f;
        return Status::Ok();
      };
      auto time_sm90 = [&] {
        return cuda::TimeBackToBack(
            stream_, [&] { return Sm90GeluLaunch(args, stream_) == cudaSuccess; }, kTimedRuns);
      };
      float cublaslt_ms = -1.f, cudnn_ms = -1.f, sm90_ms = -1.f;
      for (int round = 0; round < kTimingRounds; ++round) {
        cublaslt_ms = Faster(round, cublaslt_ms, TimeCublasLt(matmul_.get(), gemm, stream_));
        if (cudnn_runs && (round == 0 || cudnn_ms > 0)) {
          float round_ms = -1.f;
          TRAINER_RETURN_IF_ERROR(time_cudnn(round, &round_ms));
          cudnn_ms = Faster(round, cudnn_ms, round_ms);
        }
        if (sm90_runs) sm90_ms = Faster(round, sm90_ms, time_sm90());
      }
      float best_ms = cublaslt_ms;
      if (cudnn_ms > 0 && (best_ms <= 0 || cudnn_ms < best_ms))
        best_ms = cudnn_ms, choice = GeluGemmChoice::kCudnn;
      if (sm90_ms > 0 && (best_ms <= 0 || sm90_ms < best_ms))
        best_ms = sm90_ms, choice = GeluGemmChoice::kSm90;
      const char* names[] = {"cuBLASLt", "cuDNN", "sm90 kernel"};
      LogInfo(StrFormat(
          "GELU GEMM (%lld x %lld -> %lld): cuBLASLt epilogue %.3f ms, cuDNN fused graph %s, "
          "sm90 kernel %s; using %s",
          (long long)args.N, (long long)args.C, (long long)args.F, cublaslt_ms,
          cudnn_ms > 0 ? StrFormat("%.3f ms", cudnn_ms).c_str() : "(no plan)",
          sm90_ms > 0 ? StrFormat("%.3f ms", sm90_ms).c_str() : "(not for this shape)",
          names[static_cast<int>(choice)]));
    }
    it = gelu_choice_.emplace(key, choice).first;
  }
  if (it->second == GeluGemmChoice::kCudnn) {
    TRAINER_RETURN_IF_ERROR(cudnn_gelu_matmul_->Run(args, done));
    if (*done) ++counts_.gelu_cudnn;
  } else if (it->second == GeluGemmChoice::kSm90) {
    CUDA_CHECK(Sm90GeluLaunch(args, stream_));
    ++counts_.gelu_sm90;
    *done = true;
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
  auto it = dgelu_routes_.find(key);
  if (it != dgelu_routes_.end() && it->second.decided && it->second.choice < 0) return Status::Ok();
  Sm90DgeluProblem p;
  p.dout = dout.data, p.w = weight.data, p.pre = pre_act.data, p.din = din.data;
  p.m = N, p.n = F, p.k = OC;
  if (sums) TRAINER_RETURN_IF_ERROR(Scratch(kInitialScratchBytes, &p.column_partials));
  if (it == dgelu_routes_.end()) {
    DgeluRoute route;
    route.decided = !Sm90DgeluRuns(p);  // cuBLASLt's then
    route.with_cublaslt = gelu_route_ == GeluMatmulRoute::kFastest;
    it = dgelu_routes_.emplace(key, route).first;
    if (route.decided) return Status::Ok();
  }
  DgeluRoute& route = it->second;
  // Candidate c: cuBLASLt's DGELU, then with the first stage of the column sums that would follow
  // it (the caller's pass then sums din again); or ours with c - first_ours boxes' slopes in the
  // epilogue. (Both routes' second stage, a short pass over partial sums, is not timed.)
  const int first_ours = route.with_cublaslt ? 1 : 0, candidates = first_ours + kDgeluVariants;
  auto run = [&](int c) -> bool {
    if (c >= first_ours) {
      p.epilogue_slope_boxes = c - first_ours;
      return Sm90DgeluLaunch(p, stream_) == cudaSuccess;
    }
    bool ran = false;
    return matmul_->Run(gemm, &ran).ok() && ran &&
           (!sums ||
            cuda::LaunchColumnSumsPartial(compute_, static_cast<float*>(p.column_partials),
                                          din.data, N, static_cast<int>(F), F, nullptr,
                                          cuda::ColumnReductionChunks(N), stream_) == cudaSuccess);
  };
  // A candidate that ran in the untimed call and is refused later: the launch's error, if any.
  auto refused = [&](int c) {
    CUDA_CHECK(cudaGetLastError());
    return cuda::OpError("MatmulBackward", c < first_ours
                                               ? "cuBLASLt's DGELU GEMM was refused"
                                               : "the sm90 GELU-gradient kernel was refused");
  };
  int output = -1;  // the candidate whose run leaves this call's din
  if (route.decided) {
    output = first_ours + route.choice;
    if (!run(output)) return refused(output);
  } else if (route.calls == 0) {  // every candidate once, untimed: cuBLASLt tunes here
    route.failed.assign(candidates, false);
    for (int c = 0; c < candidates; ++c) route.failed[c] = !run(c);
    cudaGetLastError();  // a refused launch is the candidate's failure, not the call's
    output = candidates - 1;
    if (route.failed[output]) {  // ours was refused: cuBLASLt's route after all
      route.decided = true;
      return Status::Ok();
    }
    route.events.resize(2 * candidates * kDgeluTrials);
    for (cudaEvent_t& event : route.events) CUDA_CHECK(cudaEventCreate(&event));
    ++route.calls;
  } else {
    const int trial = route.calls - 1;
    output = trial % candidates;
    if (route.failed[output]) output = candidates - 1;
    CUDA_CHECK(cudaEventRecord(route.events[2 * trial], stream_));
    if (!run(output)) return refused(output);
    CUDA_CHECK(cudaEventRecord(route.events[2 * trial + 1], stream_));
    if (++route.calls == 1 + candidates * kDgeluTrials)
      TRAINER_RETURN_IF_ERROR(DecideDgeluRoute(key, &route));
  }
  *done = true;
  if (output < first_ours) {  // cuBLASLt's DGELU ran here; the caller sums din
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

Status CudaBackend::DecideDgeluRoute(const std::tuple<int64_t, int64_t, int64_t, bool>& key,
                                     DgeluRoute* route) {
  const bool with_cublaslt = route->with_cublaslt;
  const int first_ours = with_cublaslt ? 1 : 0, candidates = first_ours + kDgeluVariants;
  CUDA_CHECK(cudaEventSynchronize(route->events.back()));
  std::vector<float> mean_ms(candidates, 0.f);
  for (int trial = 0; trial < candidates * kDgeluTrials; ++trial) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, route->events[2 * trial], route->events[2 * trial + 1]));
    mean_ms[trial % candidates] += ms / kDgeluTrials;
  }
  for (cudaEvent_t event : route->events) cudaEventDestroy(event);
  route->events.clear();
  int best = candidates - 1;
  for (int c = 0; c < candidates; ++c)
    if (!route->failed[c] && mean_ms[c] < mean_ms[best]) best = c;
  route->decided = true;
  route->choice = best - first_ours;
  auto shown = [&](int c) {
    return route->failed[c] ? std::string("refused") : StrFormat("%.3f ms", mean_ms[c]);
  };
  const auto [N, F, OC, sums] = key;
  std::string times = with_cublaslt ? StrFormat("cuBLASLt DGELU%s %s, ",
                                                sums ? " + column sums" : "", shown(0).c_str())
                                    : std::string();
  times += StrFormat(
      "sm90 kernel %s / %s / %s (0 / 1 / 2 of a tile's 4 boxes' slopes in its "
      "epilogue)",
      shown(first_ours).c_str(), shown(first_ours + 1).c_str(), shown(first_ours + 2).c_str());
  LogInfo(StrFormat(
      "GELU-gradient GEMM (%lld x %lld -> %lld%s), %d calls each in turn: %s; using %s",
      (long long)N, (long long)OC, (long long)F, sums ? ", with din's column sums" : "",
      kDgeluTrials, times.c_str(),
      route->choice < 0 ? "cuBLASLt" : StrFormat("sm90 kernel (%d)", route->choice).c_str()));
  return Status::Ok();
}

}  // namespace trainer
