// CudaBackend's grouped matrix products (backend.h: the MoE experts over their row groups): by
// the rule, every GEMM kind runs on our sm90 kernels (sm90/grouped_gemm_sm90.h) where they run the
// shape, whatever the groups' sizes; elsewhere small groups run as one cuBLAS grouped GEMM
// (grouped_gemm.h) over the groups with rows, mapped onto column-major cuBLAS as MatmulForward and
// MatmulBackward map one linear layer (cuda_backend_layers.cpp), and large groups, the f32 weight
// gradients (cuBLAS 13.0's grouped GEMM refuses bf16 inputs with an f32 output) and kinds cuBLAS
// refuses run the per-group cuBLASLt loop (Backend's default hooks). A route may also be forced
// (set_grouped_gemm_route, TRAINER_GROUPED_GEMM) or pinned by Engine.gpu_routes (op grouped_gemm).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/check.h"
#include "common/log.h"
#include "model/cuda/cuda_backend.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/grouped_gemm.h"
#include "model/cuda/kernels.h"
#include "model/cuda/upload_ring.h"

namespace trainer {

namespace {

// The route names (GroupedGemmRoute's order) and the environment's values.
const std::vector<std::string>& GroupedNames() {
  static const std::vector<std::string> names = {"cublas", "per_expert", "sm90"};
  return names;
}
constexpr const char* kGroupedEnv = "TRAINER_GROUPED_GEMM";

// The forced route from TRAINER_GROUPED_GEMM (unset, empty or auto: none).
Status GroupedRouteFromEnv(GroupedGemmRoute* route) {
  *route = GroupedGemmRoute::kRule;
  const char* value = std::getenv(kGroupedEnv);
  if (value == nullptr || value[0] == '\0' || std::string(value) == "auto") return Status::Ok();
  for (size_t i = 0; i < GroupedNames().size(); ++i)
    if (GroupedNames()[i] == value) {
      *route = static_cast<GroupedGemmRoute>(i);
      return Status::Ok();
    }
  return UsageError(
      StrFormat("%s=%s is not a grouped GEMM route. Use auto (the default), cublas, "
                "per_expert or sm90, or unset it",
                kGroupedEnv, value));
}

// A grouped GEMM's shape as the route table names it: the kind, the experts' matrices, the dtype.
std::string GroupedShape(const char* kind, Tensor weights) {
  return StrFormat("%s E=%lld OC=%lld C=%lld %s", kind, (long long)weights.dim(0),
                   (long long)weights.dim(1), (long long)weights.dim(2), DTypeName(weights.dtype));
}

// Element `index` of t's data (of t's dtype).
char* At(Tensor t, int64_t index) {
  return static_cast<char*>(t.data) + static_cast<size_t>(index) * DTypeSize(t.dtype);
}

// The waves of groups for the weight gradient: wave w holds each expert's w-th group (with rows),
// so that no two GEMMs of one launch write the same expert's gradient.
std::vector<std::vector<ExpertRun>> Waves(const std::vector<ExpertRun>& groups, int64_t experts) {
  std::vector<std::vector<ExpertRun>> waves;
  std::vector<size_t> seen(experts, 0);
  for (const ExpertRun& g : groups) {
    if (g.rows == 0) continue;
    const size_t w = seen[g.expert]++;
    if (waves.size() <= w) waves.resize(w + 1);
    waves[w].push_back(g);
  }
  return waves;
}

// Whether the groups of a kind are small enough for cuBLAS's grouped GEMM: the mean group's GEMM
// (2 rows k x m FLOPs) takes under ~25 us at a dense GEMM's speed (~700 TFLOP/s). Below that the
// per-group loop is bound by the host (20-45 us of cuBLASLt's host work per launch) and one
// grouped launch wins; above it the per-group GEMMs win, as cuBLAS's grouped kernel is the slower
// one (on an H200, 294 TFLOP/s over 48 groups of ~340 rows of 2048 x 2048, against 784 for one
// dense GEMM of the same total size).
constexpr double kMaxMeanFlops = 25e-6 * 700e12;
bool SmallGroups(const std::vector<cuda::GroupedGemmProblem>& problems) {
  if (problems.empty()) return false;
  double flops = 0;
  for (const cuda::GroupedGemmProblem& p : problems)
    flops += 2.0 * static_cast<double>(p.m) * p.n * p.k;
  return flops / static_cast<double>(problems.size()) <= kMaxMeanFlops;
}

}  // namespace

const char* CudaBackend::kGroupedRouteOp = "grouped_gemm";

bool CudaBackend::GroupedRouteNamed(const std::string& name) {
  return std::find(GroupedNames().begin(), GroupedNames().end(), name) != GroupedNames().end();
}

Status CudaBackend::GroupedRoute(const std::string& shape, bool sm90_runs,
                                 GroupedGemmRoute* route) {
  if (!grouped_env_read_) {
    TRAINER_RETURN_IF_ERROR(GroupedRouteFromEnv(&grouped_forced_));
    grouped_env_read_ = true;
  }
  *route = grouped_forced_;
  if (*route == GroupedGemmRoute::kRule) {
    auto it = grouped_routes_.find(shape);
    if (it == grouped_routes_.end()) {  // the shape's first call: pinned or not
      const std::vector<bool> runs = {true, true, sm90_runs};
      int pinned = -1;
      TRAINER_RETURN_IF_ERROR(
          pins_.PinnedChoice(kGroupedRouteOp, shape, GroupedNames(), runs, &pinned));
      if (pinned >= 0) {
        RouteEntry entry{kGroupedRouteOp, shape, {}, pinned, "pinned"};
        for (const std::string& name : GroupedNames()) entry.candidates.push_back({name, -1.f});
        routes_.Record(std::move(entry));
      }
      it = grouped_routes_
               .emplace(shape, pinned >= 0 ? static_cast<GroupedGemmRoute>(pinned)
                                           : GroupedGemmRoute::kRule)
               .first;
    }
    *route = it->second;
  }
  if (*route == GroupedGemmRoute::kSm90 && !sm90_runs) *route = GroupedGemmRoute::kRule;
  // The rule: our kernels wherever they run the shape. With small groups (48 of ~341 rows of
  // 2048 x 2048 on an H200) they ran 531-588 TFLOP/s forward and input gradient and 305-325
  // weight gradient, against cuBLAS grouped's 274-291 and 194-199 and per-group cuBLASLt's
  // 188-197; with large ones (the Mixtral-style bench's 8 experts of 2048 x 7168, ~2000 rows each)
  // the step ran 66,284 tokens/s against 55,735 per expert on an H100 (the per-group loop's
  // cuBLASLt host work left the GPU idle a fifth of the step).
  if (*route == GroupedGemmRoute::kRule && sm90_runs) *route = GroupedGemmRoute::kSm90;
  return Status::Ok();
}

#if defined(TRAINER_WITH_SM90_KERNELS)
bool CudaBackend::GroupedSm90Runs(const cuda::GroupedSm90Problem& p) const {
  return compute_ == DType::kBF16 && cuda::GroupedSm90Supported(p);
}
bool CudaBackend::GroupedSm90Runs(const cuda::GroupedSm90WeightGradient& p) const {
  return compute_ == DType::kBF16 && cuda::GroupedSm90WeightGradientSupported(p);
}
#else  // never asked to launch: nothing runs
bool CudaBackend::GroupedSm90Runs(const cuda::GroupedSm90Problem&) const {
  return false;
}
bool CudaBackend::GroupedSm90Runs(const cuda::GroupedSm90WeightGradient&) const {
  return false;
}
namespace cuda {
cudaError_t LaunchGroupedSm90(const GroupedSm90Problem&, cudaStream_t) {
  return cudaErrorNotSupported;
}
cudaError_t LaunchGroupedSm90WeightGradient(const GroupedSm90WeightGradient&, cudaStream_t) {
  return cudaErrorNotSupported;
}
int64_t GroupedSm90WeightGradientSquares(const GroupedSm90WeightGradient&) {
  return 0;
}
}  // namespace cuda
#endif

Status CudaBackend::UploadGrouped(const void* data, size_t bytes, const void** device) {
  if (grouped_upload_ == nullptr)
    TRAINER_RETURN_IF_ERROR(cuda::UploadRing::Create(stream_, bytes, &grouped_upload_));
  void* copy = nullptr;
  TRAINER_RETURN_IF_ERROR(grouped_upload_->Upload(data, bytes, &copy));
  *device = copy;
  return Status::Ok();
}

Status CudaBackend::RunGroupedSm90(cuda::GroupedSm90Problem p,
                                   const std::vector<ExpertRun>& groups) {
  grouped_blocks_.clear();
  for (const ExpertRun& g : groups)
    cuda::AppendGroupedBlocks(g.expert, g.offset, g.rows, &grouped_blocks_);
  if (grouped_blocks_.empty()) return Status::Ok();
  const void* blocks = nullptr;
  TRAINER_RETURN_IF_ERROR(UploadGrouped(
      grouped_blocks_.data(), grouped_blocks_.size() * sizeof(cuda::GroupedBlock), &blocks));
  p.blocks = static_cast<const cuda::GroupedBlock*>(blocks);
  p.block_count = static_cast<int64_t>(grouped_blocks_.size());
  CUDA_CHECK(cuda::LaunchGroupedSm90(p, stream_));
  ++counts_.grouped_sm90;
  return Status::Ok();
}

Status CudaBackend::RunGroupedSm90(cuda::GroupedSm90WeightGradient p,
                                   const std::vector<ExpertRun>& groups, Tensor squares) {
  cuda::MakeGroupedExperts(groups, p.experts, &grouped_blocks_, &grouped_experts_);
  if (grouped_experts_.empty()) return Status::Ok();  // dW's experts were all zeroed: adds 0
  const void *experts = nullptr, *runs = nullptr;
  TRAINER_RETURN_IF_ERROR(UploadGrouped(
      grouped_experts_.data(), grouped_experts_.size() * sizeof(cuda::GroupedExpert), &experts));
  TRAINER_RETURN_IF_ERROR(UploadGrouped(
      grouped_blocks_.data(), grouped_blocks_.size() * sizeof(cuda::GroupedBlock), &runs));
  p.expert_list = static_cast<const cuda::GroupedExpert*>(experts);
  p.expert_count = static_cast<int64_t>(grouped_experts_.size());
  p.runs = static_cast<const cuda::GroupedBlock*>(runs);
  TRAINER_ASSERT(squares.empty() || !p.accumulate, "dW's squares of an accumulating launch");
  const int64_t tile_squares = squares.empty() ? 0 : cuda::GroupedSm90WeightGradientSquares(p);
  if (tile_squares > 0) {
    void* scratch = nullptr;
    TRAINER_RETURN_IF_ERROR(Scratch(static_cast<size_t>(tile_squares) * sizeof(double), &scratch));
    p.tile_squares = static_cast<double*>(scratch);
  }
  CUDA_CHECK(cuda::LaunchGroupedSm90WeightGradient(p, stream_));
  ++counts_.grouped_sm90;
  if (tile_squares > 0) {
    CUDA_CHECK(
        cuda::LaunchSumPartials(p.tile_squares, tile_squares, true, squares.as<double>(), stream_));
    ++counts_.grouped_sm90_squares;
  }
  return Status::Ok();
}

Status CudaBackend::LaunchGrouped(const cuda::GroupedGemmKind& kind,
                                  const std::vector<cuda::GroupedGemmProblem>& problems,
                                  bool forced, bool* done) {
  *done = true;
  if (problems.empty()) return Status::Ok();
  *done = false;
  if (!forced && !SmallGroups(problems)) return Status::Ok();  // the per-group loop, not a fallback
  TRAINER_RETURN_IF_ERROR(grouped_gemm_->Run(kind, problems, done));
  ++(*done ? counts_.grouped_gemm : counts_.grouped_gemm_fallback);
  return Status::Ok();
}

Status CudaBackend::RunGroupedMatmulForward(Tensor out, Tensor in, Tensor weights,
                                            const std::vector<ExpertRun>& groups) {
  const int64_t E = weights.dim(0), OC = weights.dim(1), C = weights.dim(2);
  const cuda::GroupedSm90Problem sm90{cuda::GroupedSm90Op::kForward, in.data, weights.data,
                                      out.data, in.dim(0), E, OC, C};
  GroupedGemmRoute route;
  TRAINER_RETURN_IF_ERROR(
      GroupedRoute(GroupedShape("forward", weights), GroupedSm90Runs(sm90), &route));
  if (route == GroupedGemmRoute::kSm90) return RunGroupedSm90(sm90, groups);
  if (route == GroupedGemmRoute::kPerExpert)
    return Backend::RunGroupedMatmulForward(out, in, weights, groups);
  // out[R]^T (OC,n) = W_e (C,OC)^T in[R]^T (C,n).
  std::vector<cuda::GroupedGemmProblem>& problems = grouped_problems_;
  problems.clear();
  for (const ExpertRun& g : groups)
    if (g.rows > 0)
      problems.push_back({OC, g.rows, C, At(weights, g.expert * OC * C), C, At(in, g.offset * C), C,
                          At(out, g.offset * OC), OC, 0.f});
  bool done = false;
  TRAINER_RETURN_IF_ERROR(LaunchGrouped({true, false, compute_, compute_}, problems,
                                        route == GroupedGemmRoute::kCublas, &done));
  if (done) return Status::Ok();
  return Backend::RunGroupedMatmulForward(out, in, weights, groups);
}

Status CudaBackend::RunGroupedMatmulSwiGluForward(Tensor h, Tensor act, Tensor in, Tensor weights,
                                                  const std::vector<ExpertRun>& groups) {
  const int64_t E = weights.dim(0), OC = weights.dim(1), C = weights.dim(2);
  cuda::GroupedSm90Problem sm90{
      cuda::GroupedSm90Op::kForwardSwiGlu, in.data, weights.data, h.data, in.dim(0), E, OC, C};
  sm90.act = act.data;
  // The forward's route (its pins apply): where it is ours, the SwiGLU runs in its epilogue.
  GroupedGemmRoute route;
  TRAINER_RETURN_IF_ERROR(
      GroupedRoute(GroupedShape("forward", weights), GroupedSm90Runs(sm90), &route));
  if (route == GroupedGemmRoute::kSm90) return RunGroupedSm90(sm90, groups);
  return Backend::RunGroupedMatmulSwiGluForward(h, act, in, weights, groups);
}

Status CudaBackend::RunGroupedMatmulBackward(Tensor din, Tensor dweights, Tensor dout, Tensor in,
                                             Tensor weights, const std::vector<ExpertRun>& groups,
                                             GradientWrite dweights_write,
                                             Tensor dweights_squares) {
  if (!din.empty()) TRAINER_RETURN_IF_ERROR(GroupedInputGradient(din, dout, in, weights, groups));
  if (dweights.empty()) return Status::Ok();
  bool summed = false;  // the squares summed as the kernel wrote dweights
  TRAINER_RETURN_IF_ERROR(GroupedWeightGradient(dweights, dout, in, weights, groups, dweights_write,
                                                dweights_squares, &summed));
  if (dweights_squares.empty() || summed) return Status::Ok();
  return RunSumInto(dweights_squares, dweights, SumOf::kSquares, true);
}

Status CudaBackend::GroupedWeightGradient(Tensor dweights, Tensor dout, Tensor in, Tensor weights,
                                          const std::vector<ExpertRun>& groups,
                                          GradientWrite dweights_write, Tensor dweights_squares,
                                          bool* summed) {
  const int64_t E = weights.dim(0), OC = weights.dim(1), C = weights.dim(2);
  cuda::GroupedSm90WeightGradient sm90;
  sm90.dout = dout.data, sm90.in = in.data, sm90.dweights = dweights.data;
  sm90.accumulate = dweights_write == GradientWrite::kAccumulate;
  // The rows both tensors have (dout has the shared expert's rows after the routed ones, which
  // `in` may not): the maps' bound, past which TMA reads zeros, and the groups lie below it.
  sm90.m = std::min(dout.dim(0), in.dim(0));
  sm90.experts = E, sm90.oc = OC, sm90.c = C;
  GroupedGemmRoute route;
  TRAINER_RETURN_IF_ERROR(
      GroupedRoute(GroupedShape("weight_gradient", weights), GroupedSm90Runs(sm90), &route));
  if (route == GroupedGemmRoute::kSm90) {
    // Overwritten, the kernel's tiles sum their squares as they store them.
    *summed = !dweights_squares.empty() && !sm90.accumulate;
    return RunGroupedSm90(sm90, groups, *summed ? dweights_squares : Tensor());
  }
  // dW_e^T (C,OC) (+)= in[R]^T (C,n) dout[R] (n,OC), in f32: the ragged dimension is k.
  // (bf16 inputs with an f32 output: cuBLAS 13.0's grouped GEMM refuses them, so the per-group
  // loop runs them without asking.)
  const std::vector<std::vector<ExpertRun>> waves =
      compute_ == DType::kF32 && route != GroupedGemmRoute::kPerExpert
          ? Waves(groups, E)
          : std::vector<std::vector<ExpertRun>>{};
  if (waves.empty())
    return Backend::RunGroupedMatmulBackward(Tensor(), dweights, dout, in, weights, groups,
                                             dweights_write, Tensor());
  for (size_t w = 0; w < waves.size(); ++w) {
    const bool overwrite = w == 0 && dweights_write == GradientWrite::kOverwrite;
    std::vector<cuda::GroupedGemmProblem>& problems = grouped_problems_;
    problems.clear();
    for (const ExpertRun& g : waves[w])
      problems.push_back({C, OC, g.rows, At(in, g.offset * C), C, At(dout, g.offset * OC), OC,
                          At(dweights, g.expert * OC * C), C, overwrite ? 0.f : 1.f});
    bool done = false;
    TRAINER_RETURN_IF_ERROR(LaunchGrouped({false, true, compute_, DType::kF32}, problems,
                                          route == GroupedGemmRoute::kCublas, &done));
    if (done) continue;
    // Refused: this wave and the later ones by the per-group loop.
    std::vector<ExpertRun> rest;
    for (size_t v = w; v < waves.size(); ++v)
      rest.insert(rest.end(), waves[v].begin(), waves[v].end());
    return Backend::RunGroupedMatmulBackward(Tensor(), dweights, dout, in, weights, rest,
                                             w == 0 ? dweights_write : GradientWrite::kAccumulate,
                                             Tensor());
  }
  return Status::Ok();
}

Status CudaBackend::GroupedInputGradient(Tensor din, Tensor dout, Tensor in, Tensor weights,
                                         const std::vector<ExpertRun>& groups) {
  const int64_t E = weights.dim(0), OC = weights.dim(1), C = weights.dim(2);
  const cuda::GroupedSm90Problem sm90{cuda::GroupedSm90Op::kInputGradient, dout.data,
                                      weights.data, din.data, dout.dim(0), E, OC, C};
  GroupedGemmRoute route;
  TRAINER_RETURN_IF_ERROR(
      GroupedRoute(GroupedShape("input_gradient", weights), GroupedSm90Runs(sm90), &route));
  if (route == GroupedGemmRoute::kSm90) return RunGroupedSm90(sm90, groups);
  bool done = false;
  if (route != GroupedGemmRoute::kPerExpert) {  // din[R]^T (C,n) = W_e (C,OC) dout[R]^T (OC,n)
    std::vector<cuda::GroupedGemmProblem>& problems = grouped_problems_;
    problems.clear();
    for (const ExpertRun& g : groups)
      if (g.rows > 0)
        problems.push_back({C, g.rows, OC, At(weights, g.expert * OC * C), C,
                            At(dout, g.offset * OC), OC, At(din, g.offset * C), C, 0.f});
    TRAINER_RETURN_IF_ERROR(LaunchGrouped({false, false, compute_, compute_}, problems,
                                          route == GroupedGemmRoute::kCublas, &done));
  }
  if (!done)
    return Backend::RunGroupedMatmulBackward(din, Tensor(), dout, in, weights, groups,
                                             GradientWrite::kAccumulate, Tensor());
  return Status::Ok();
}

}  // namespace trainer
