// CudaBackend's routes for the MLP's two GELU GEMMs (the op tier picks them in
// cuda_backend_layers.cpp): the forward pre = x W_fc^T + bias, out = GELU(pre) by cuBLASLt's
// GELU_AUX_BIAS epilogue, cuDNN's fused graph or our sm90 kernel, and the GELU-gradient GEMM
// din = GELU'(pre) * (dout W_proj) by cuBLASLt's DGELU epilogue or our sm90 kernel. Each shape's
// route is chosen by the route policy (model/route_policy.h; the forward's candidates timed on the
// shape's first call, the gradient's over the shape's own calls in the run's first step) or pinned
// by Engine.gpu_routes, and recorded in the route table (ops gelu_gemm_forward and
// gelu_gemm_gradient).
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

// The routes' names in the route table (model/route_table.h, Engine.gpu_routes).
constexpr const char* kForwardOp = "gelu_gemm_forward";
constexpr const char* kGradientOp = "gelu_gemm_gradient";
// The forward's candidates, in GeluGemmChoice's order.
const std::vector<std::string>& ForwardNames() {
  static const std::vector<std::string> names = {"cublaslt", "cudnn", "sm90", "sm90_pairs"};
  return names;
}

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
// The variant's route name: "sm90:" and the slope boxes in its epilogue, "p" in CTA pairs, "e"
// with the column sums in its epilogue.
std::string DgeluVariantName(const DgeluVariant& v) {
  return StrFormat("sm90:%d%s%s", v.slope_boxes, v.cluster == 2 ? "p" : "",
                   v.sums_in_epilogue ? "e" : "");
}
// The shapes as the route table names them.
std::string ForwardShape(int64_t N, int64_t C, int64_t F, bool bias) {
  return StrFormat("N=%lld C=%lld F=%lld %s", (long long)N, (long long)C, (long long)F,
                   bias ? "bias" : "nobias");
}
std::string GradientShape(int64_t N, int64_t F, int64_t OC, bool sums) {
  return StrFormat("N=%lld F=%lld OC=%lld %s", (long long)N, (long long)F, (long long)OC,
                   sums ? "sums" : "nosums");
}
// The gradient's candidates: cuBLASLt's DGELU first where with_cublaslt, then the variants.
std::vector<std::string> GradientNames(bool with_cublaslt, bool sums) {
  std::vector<std::string> names;
  if (with_cublaslt) names.push_back("cublaslt");
  for (const DgeluVariant& v : DgeluVariants(sums)) names.push_back(DgeluVariantName(v));
  return names;
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
    if (gelu_route_ == GeluMatmulRoute::kFastest)
      TRAINER_RETURN_IF_ERROR(ChooseGeluForward(gemm, args, cudnn_runs, sm90_runs, &choice));
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

Status CudaBackend::ChooseGeluForward(const cuda::Gemm& gemm, const cuda::GeluMatmulArgs& args,
                                      bool cudnn_runs, const bool sm90_runs[2],
                                      GeluGemmChoice* choice) {
  const std::string shape = ForwardShape(args.N, args.C, args.F, args.bias != nullptr);
  // Candidate c in GeluGemmChoice's order; the outputs hold the last run's result, and the
  // caller runs the chosen one again (cuBLASLt's when it is chosen). A library that fails counts
  // as a refusal, except for a pin of its own that does not apply (a usage error, passed on).
  Status pin_error, run_error;  // run_error: a library's own failure, named if a pin meets it
  auto ran_ok = [&](const Status& s, bool ran) {
    if (s.code() == ExitCode::kUsage && pin_error.ok()) pin_error = s;
    if (!s.ok() && s.code() != ExitCode::kUsage && run_error.ok()) run_error = s;
    return s.ok() && ran;
  };
  // Each library's status first, then `ran`, which it sets: as two arguments of one call the
  // order would be unspecified (GCC reads `ran` first, so both libraries always "refused").
  auto run = [&](int c) -> bool {
    bool ran = false;
    switch (static_cast<GeluGemmChoice>(c)) {
      case GeluGemmChoice::kCublasLt: {
        const Status s = matmul_->Run(gemm, &ran);
        return ran_ok(s, ran);
      }
      case GeluGemmChoice::kCudnn: {
        if (!cudnn_runs) return false;
        const Status s = cudnn_gelu_matmul_->Run(args, &ran);
        return ran_ok(s, ran);
      }
      default:
        return sm90_runs[c - 2] && Sm90GeluLaunch(args, c - 1, stream_) == cudaSuccess;
    }
  };
  cuda::RouteTrial trial(static_cast<int>(ForwardNames().size()));
  int pinned = -1;
  const std::vector<bool> runs = {true, cudnn_runs, sm90_runs[0], sm90_runs[1]};
  TRAINER_RETURN_IF_ERROR(pins_.PinnedChoice(kForwardOp, shape, ForwardNames(), runs, &pinned));
  if (pinned >= 0 && !run(pinned)) {  // e.g. cuDNN has no plan for the shape
    TRAINER_RETURN_IF_ERROR(pin_error);
    if (!run_error.ok())
      return RuntimeError(StrFormat("%s pinned to %s on shape %s: %s", kForwardOp,
                                    ForwardNames()[pinned].c_str(), shape.c_str(),
                                    run_error.message().c_str()));
    return pins_.PinnedChoice(kForwardOp, shape, ForwardNames(),
                              std::vector<bool>(runs.size(), false), &pinned);
  }
  if (pinned >= 0)
    trial.Pin(pinned);
  else  // the candidates back to back on this call (timed over the step's calls instead, the
        // trainer ran 0.5% slower at 350M and 1.3B)
    TRAINER_RETURN_IF_ERROR(trial.RunToEnd(stream_, run));
  TRAINER_RETURN_IF_ERROR(pin_error);
  routes_.Record(trial.Entry(kForwardOp, shape, ForwardNames()));
  if (trial.choice() >= 0) *choice = static_cast<GeluGemmChoice>(trial.choice());
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
  // what it holds from the start (so that the memory plan stays exact), as do the (chunks, F) of
  // the trial's cuBLASLt candidate, which sums into the same place; else their own pass.
  const int64_t partial_rows = N / 128;  // our kernel's, summed after it
  const int64_t scratch_rows = std::max<int64_t>(partial_rows, cuda::ColumnReductionChunks(N));
  const bool sums = !din_sums.empty() &&
                    static_cast<size_t>(scratch_rows * F) * sizeof(float) <= kInitialScratchBytes;
  const auto key = std::make_tuple(N, F, OC, sums);
  Sm90DgeluProblem p;
  p.dout = dout.data, p.w = weight.data, p.pre = pre_act.data, p.din = din.data;
  p.m = N, p.n = F, p.k = OC;
  if (sums) TRAINER_RETURN_IF_ERROR(Scratch(kInitialScratchBytes, &p.column_partials));
  const std::vector<DgeluVariant>& variants = DgeluVariants(sums);
  const std::string shape = GradientShape(N, F, OC, sums);
  auto it = dgelu_routes_.find(key);
  if (it == dgelu_routes_.end()) {
    DgeluRoute route;
    route.with_cublaslt = gelu_route_ == GeluMatmulRoute::kFastest;
    route.names = GradientNames(route.with_cublaslt, sums);
    // Our kernel not for this shape: no trial, cuBLASLt's route (the caller's).
    const bool ours = Sm90DgeluRuns(p);
    const int first = route.with_cublaslt ? 1 : 0;
    std::vector<bool> runs(route.names.size(), true);
    for (size_t v = 0; v < variants.size(); ++v) {
      SetDgeluVariant(variants[v], &p);
      runs[first + v] = ours && Sm90DgeluRuns(p);
    }
    int pinned = -1;
    if (route.with_cublaslt)  // the pins name cuBLASLt's route too
      TRAINER_RETURN_IF_ERROR(pins_.PinnedChoice(kGradientOp, shape, route.names, runs, &pinned));
    if (ours || pinned >= 0)
      route.trial = std::make_unique<cuda::RouteTrial>(static_cast<int>(route.names.size()));
    if (pinned >= 0) {
      route.trial->Pin(pinned);
      routes_.Record(route.trial->Entry(kGradientOp, shape, route.names));
    } else if (!ours && route.with_cublaslt) {
      routes_.Record({kGradientOp, shape, {{"cublaslt", -1.f}}, 0, "only"});
    }
    it = dgelu_routes_.emplace(key, std::move(route)).first;
  }
  DgeluRoute& route = it->second;
  const int first_ours = route.with_cublaslt ? 1 : 0;
  // cuBLASLt's route, or none of ours for the shape: the caller's GEMM and column sums (the
  // trial's cuBLASLt candidate below times the sums' first stage with it, which would be a second
  // pass over din here).
  if (route.trial == nullptr || (route.trial->decided() && route.trial->choice() < first_ours))
    return Status::Ok();
  Status pin_error;
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
    const Status s = matmul_->Run(gemm, &ran);
    if (s.code() == ExitCode::kUsage && pin_error.ok()) pin_error = s;  // a cuBLASLt pin's
    return s.ok() && ran &&
           (!sums ||
            cuda::LaunchColumnSumsPartial(compute_, static_cast<float*>(p.column_partials),
                                          din.data, N, static_cast<int>(F), F, nullptr,
                                          cuda::ColumnReductionChunks(N), stream_) == cudaSuccess);
  };
  cuda::RouteTrial::CallResult call;
  TRAINER_RETURN_IF_ERROR(route.trial->Call(stream_, run, &call));
  TRAINER_RETURN_IF_ERROR(pin_error);
  if (call.decided_now) routes_.Record(route.trial->Entry(kGradientOp, shape, route.names));
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

bool CudaBackend::routes_settled() const {
  for (const auto& shape : dgelu_routes_)
    if (shape.second.trial != nullptr && !shape.second.trial->decided()) return false;
  return true;
}

Status CudaBackend::PinRoutes(const RouteTable& pins) {
  auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const std::vector<std::string> gradient = GradientNames(true, true);  // every variant
  TRAINER_RETURN_IF_ERROR(pins.CheckNames(
      {{kForwardOp, [&](const std::string& c) { return listed(ForwardNames(), c); }},
       {kGradientOp, [&](const std::string& c) { return listed(gradient, c); }},
       {"attention", [&](const std::string& c) { return c == "cudnn" || c == "ours"; }},
       {kGroupedRouteOp, GroupedRouteNamed},
       {"attention_documents",
        [&](const std::string& c) { return c == "cudnn" || c == "ours"; }},
       {cuda::CudnnGeluMatmul::kRouteOp,
        [](const std::string& c) { return c.rfind("plan", 0) == 0 && c.size() > 4; }},
       {cuda::CublasLtMatmul::kRouteOp, cuda::CublasLtMatmul::IsAlgoName}}));
  pins_ = pins;
  return Status::Ok();
}

Status CudaBackend::AdoptRoutes(const RouteTable& table) {
  if (pins_.source().empty()) pins_.set_source("rank 0's routes");
  bool synchronized = false;
  for (const RouteEntry& e : table.entries()) {
    const RouteEntry* mine = routes_.Find(e.op, e.shape);
    if (mine == nullptr || mine->chosen_name() == e.chosen_name()) continue;
    // Only timed choices: a rule's follows what each rank's libraries run (cuDNN refuses some
    // document buckets on one rank and not another), and pins come from one file for all.
    if (e.how != "timed") continue;
    if (!synchronized) {  // the forgotten plans and graphs may still have launches queued
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      synchronized = true;
    }
    pins_.Record({e.op, e.shape, {{e.chosen_name(), -1.f}}, 0, "pinned"});
    ForgetRoute(e.op, e.shape);
  }
  return Status::Ok();
}

void CudaBackend::ForgetRoute(const std::string& op, const std::string& shape) {
  if (op == kForwardOp) {
    for (auto it = gelu_choice_.begin(); it != gelu_choice_.end(); ++it) {
      const auto& [N, C, F, bias] = it->first;
      if (ForwardShape(N, C, F, bias) == shape) {
        gelu_choice_.erase(it);
        break;
      }
    }
  } else if (op == kGradientOp) {
    for (auto it = dgelu_routes_.begin(); it != dgelu_routes_.end(); ++it) {
      const auto& [N, F, OC, sums] = it->first;
      if (GradientShape(N, F, OC, sums) == shape) {
        dgelu_routes_.erase(it);
        break;
      }
    }
  } else if (op == "attention" || op == "attention_documents") {
    ForgetAttentionRoute(op, shape);
  } else if (op == kGroupedRouteOp) {
    grouped_routes_.erase(shape);
  } else if (op == cuda::CublasLtMatmul::kRouteOp) {
    matmul_->Forget(shape);
  } else if (op == cuda::CudnnGeluMatmul::kRouteOp && cudnn_gelu_matmul_ != nullptr) {
    cudnn_gelu_matmul_->Forget(shape);
  }
}

}  // namespace trainer
