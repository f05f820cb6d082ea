// CudaBackend's routes for the MLP's two GELU GEMMs (the op tier picks them in
// cuda_backend_layers.cpp): the forward pre = x W_fc^T + bias, out = GELU(pre) by cuBLASLt's
// GELU_AUX_BIAS epilogue, cuDNN's fused graph or our sm90 kernel, and the GELU-gradient GEMM
// din = GELU'(pre) * (dout W_proj) by cuBLASLt's DGELU epilogue or our sm90 kernel. The forward's
// route is timed on the shape's first call, the gradient's from the times of the shape's own calls
// in the run's first step (route_trial.h).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

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
  bool sums_in_epilogue = false;
  int cluster = 1;
};
bool Sm90DgeluRuns(const Sm90DgeluProblem&) {
  return false;
}
cudaError_t Sm90DgeluLaunch(const Sm90DgeluProblem&, cudaStream_t) {
  return cudaErrorNotSupported;
}
#endif

// The forward's routes are timed on the shape's first call: kTimedRuns back-to-back runs behind an
// untimed one, in each of kTimingRounds rounds that take the routes in turn; a route's time is its
// fastest round's. (Timing them instead over the shape's calls in the first step, as the
// gradient's, took cuDNN's graph at 350M and cuBLASLt's epilogue at 1.3B, and the trainer ran
// slower than with ours, 0.995 and 0.998 of its tokens/s, in two separate measurements.)
constexpr int kTimedRuns = 3;
constexpr int kTimingRounds = 2;

// A route's time over rounds: the faster of its best so far and this round's; a failed round
// (<= 0) fails the route.
float Faster(int round, float best_ms, float round_ms) {
  if (round == 0) return round_ms;
  return best_ms <= 0 || round_ms <= 0 ? -1.f : std::min(best_ms, round_ms);
}

// Timed calls of each candidate in the gradient's trial (route_trial.h).
constexpr int kTrialsEach = 4;
// Our GELU-gradient kernel's variants in the trial: 0, 1 or 2 of a tile's four boxes' slopes in
// its epilogue, alone and in CTA pairs (clusters of two sharing the weight's k-blocks), with din's
// column sums by the spare warps and (where there are sums) in the multipliers' epilogue.
struct DgeluVariant {
  int slope_boxes, cluster;
  bool sums_in_epilogue;
};
std::vector<DgeluVariant> MakeDgeluVariants(bool sums) {
  std::vector<DgeluVariant> variants;
  for (bool in_epilogue : {false, true}) {
    if (in_epilogue && !sums) break;  // without sums the two are the same kernel
    for (int cluster = 1; cluster <= 2; ++cluster)
      for (int boxes = 0; boxes <= 2; ++boxes) variants.push_back({boxes, cluster, in_epilogue});
  }
  return variants;
}
const std::vector<DgeluVariant>& DgeluVariants(bool sums) {
  static const std::vector<DgeluVariant> with_sums = MakeDgeluVariants(true),
                                         without = MakeDgeluVariants(false);
  return sums ? with_sums : without;
}
void SetDgeluVariant(const DgeluVariant& v, Sm90DgeluProblem* p) {
  p->epilogue_slope_boxes = v.slope_boxes;
  p->cluster = v.cluster;
  p->sums_in_epilogue = v.sums_in_epilogue;
}
// As the trainer's log names it (the legend is in the log line).
std::string DgeluVariantName(const DgeluVariant& v) {
  return StrFormat("%d%s%s", v.slope_boxes, v.cluster == 2 ? "p" : "",
                   v.sums_in_epilogue ? "e" : "");
}

}  // namespace

Status CudaBackend::FusedGeluMatmul(const cuda::Gemm& gemm, const cuda::GeluMatmulArgs& args,
                                    bool* done) {
  *done = false;
  if (compute_ != DType::kBF16 || gelu_route_ == GeluMatmulRoute::kCublasLt) return Status::Ok();
  const auto key = std::make_tuple(args.N, args.C, args.F, args.bias != nullptr);
  auto it = gelu_choice_.find(key);
  if (it == gelu_choice_.end()) {  // the shape's first call: who can run it, and who runs it
    const bool cudnn_runs = cudnn_gelu_matmul_ != nullptr;
    const bool sm90_runs[2] = {Sm90GeluRuns(args, 1), Sm90GeluRuns(args, 2)};
    GeluGemmChoice choice = GeluGemmChoice::kCublasLt;
    if (gelu_route_ == GeluMatmulRoute::kCudnn && cudnn_runs) choice = GeluGemmChoice::kCudnn;
    if (gelu_route_ == GeluMatmulRoute::kSm90 && sm90_runs[0]) choice = GeluGemmChoice::kSm90;
    if (gelu_route_ == GeluMatmulRoute::kFastest) {
      // cuBLASLt's time (its first run tunes it), cuDNN's fastest plan's, then ours alone and in
      // CTA pairs, in rounds; the outputs hold the last one's result, and the caller runs
      // cuBLASLt again when it wins. cuDNN's first run picks its plan and gives that plan's time;
      // later rounds time the plan.
      auto time_cublaslt = [&] {
        return cuda::TimeBackToBack(
            stream_,
            [&] {
              bool ran = false;
              return matmul_->Run(gemm, &ran).ok() && ran;
            },
            kTimedRuns);
      };
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
      auto time_sm90 = [&](int cluster) {
        return cuda::TimeBackToBack(
            stream_, [&] { return Sm90GeluLaunch(args, cluster, stream_) == cudaSuccess; },
            kTimedRuns);
      };
      // Per choice (GeluGemmChoice's order): its time, or -1.
      float ms[4] = {-1.f, -1.f, -1.f, -1.f};
      for (int round = 0; round < kTimingRounds; ++round) {
        ms[0] = Faster(round, ms[0], time_cublaslt());
        if (cudnn_runs && (round == 0 || ms[1] > 0)) {
          float round_ms = -1.f;
          TRAINER_RETURN_IF_ERROR(time_cudnn(round, &round_ms));
          ms[1] = Faster(round, ms[1], round_ms);
        }
        for (int pairs = 0; pairs < 2; ++pairs)
          if (sm90_runs[pairs]) ms[2 + pairs] = Faster(round, ms[2 + pairs], time_sm90(1 + pairs));
      }
      for (int c = 1; c < 4; ++c)
        if (ms[c] > 0 &&
            (ms[static_cast<int>(choice)] <= 0 || ms[c] < ms[static_cast<int>(choice)]))
          choice = static_cast<GeluGemmChoice>(c);
      const char* names[] = {"cuBLASLt", "cuDNN", "sm90 kernel", "sm90 kernel in CTA pairs"};
      auto shown = [&](int c, const char* absent) {
        return ms[c] > 0 ? StrFormat("%.3f ms", ms[c]) : std::string(absent);
      };
      LogInfo(StrFormat(
          "GELU GEMM (%lld x %lld -> %lld): cuBLASLt epilogue %s, cuDNN fused graph %s, "
          "sm90 kernel %s, in CTA pairs %s; using %s",
          (long long)args.N, (long long)args.C, (long long)args.F, shown(0, "failed").c_str(),
          shown(1, "(no plan)").c_str(), shown(2, "(not for this shape)").c_str(),
          shown(3, "(not for this shape)").c_str(), names[static_cast<int>(choice)]));
    }
    it = gelu_choice_.emplace(key, choice).first;
  }
  if (it->second == GeluGemmChoice::kCudnn) {
    TRAINER_RETURN_IF_ERROR(cudnn_gelu_matmul_->Run(args, done));
    if (*done) ++counts_.gelu_cudnn;
  } else if (it->second != GeluGemmChoice::kCublasLt) {
    CUDA_CHECK(Sm90GeluLaunch(args, it->second == GeluGemmChoice::kSm90Pairs ? 2 : 1, stream_));
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
  Sm90DgeluProblem p;
  p.dout = dout.data, p.w = weight.data, p.pre = pre_act.data, p.din = din.data;
  p.m = N, p.n = F, p.k = OC;
  if (sums) TRAINER_RETURN_IF_ERROR(Scratch(kInitialScratchBytes, &p.column_partials));
  const std::vector<DgeluVariant>& variants = DgeluVariants(sums);
  auto it = dgelu_routes_.find(key);
  if (it == dgelu_routes_.end()) {
    DgeluRoute route;
    route.with_cublaslt = gelu_route_ == GeluMatmulRoute::kFastest;
    // Our kernel not for this shape: no trial, cuBLASLt's route (the caller's).
    const int candidates =
        Sm90DgeluRuns(p) ? (route.with_cublaslt ? 1 : 0) + static_cast<int>(variants.size()) : 0;
    if (candidates > 0) route.trial = std::make_unique<cuda::RouteTrial>(candidates, kTrialsEach);
    it = dgelu_routes_.emplace(key, std::move(route)).first;
  }
  DgeluRoute& route = it->second;
  const int first_ours = route.with_cublaslt ? 1 : 0;
  // cuBLASLt's route, or none of ours for the shape: the caller's GEMM and column sums (the
  // trial's cuBLASLt candidate below times the sums' first stage with it, which would be a second
  // pass over din here).
  if (route.trial == nullptr || (route.trial->decided() && route.trial->choice() < first_ours))
    return Status::Ok();
  // Candidate c: cuBLASLt's DGELU, with the first stage of the column sums that would follow it
  // (the caller's pass then sums din again); or ours, variant c - first_ours. (Both routes'
  // second stage, a short pass over partial sums, is not timed.)
  auto run = [&](int c) -> bool {
    if (c >= first_ours) {
      SetDgeluVariant(variants[c - first_ours], &p);
      return Sm90DgeluLaunch(p, stream_) == cudaSuccess;
    }
    bool ran = false;
    if (sums) ++counts_.din_sum_passes;
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
    times +=
        "sm90 kernel (slope boxes in its epilogue; p: in CTA pairs, e: column sums in its "
        "epilogue)";
    for (size_t v = 0; v < variants.size(); ++v)
      times += StrFormat("%s %s %s", v == 0 ? ":" : ",", DgeluVariantName(variants[v]).c_str(),
                         shown(first_ours + static_cast<int>(v)).c_str());
    const int choice = trial.choice();
    LogInfo(StrFormat(
        "GELU-gradient GEMM (%lld x %lld -> %lld%s), %d calls each in turn: %s; using %s",
        (long long)N, (long long)OC, (long long)F, sums ? ", with din's column sums" : "",
        kTrialsEach, times.c_str(),
        choice < first_ours
            ? "cuBLASLt"
            : ("sm90 kernel " + DgeluVariantName(variants[choice - first_ours])).c_str()));
  }
  if (call.refused) {
    CUDA_CHECK(cudaGetLastError());
    return cuda::OpError("MatmulBackward", call.output < first_ours
                                               ? "cuBLASLt's DGELU GEMM was refused"
                                               : "the sm90 GELU-gradient kernel was refused");
  }
  if (call.output < 0) return Status::Ok();  // every candidate refused: the caller's route
  *done = true;
  if (call.output < first_ours) {  // cuBLASLt's DGELU ran in the trial here; the caller sums din
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
