// CudaBackend's grouped matrix products (backend.h: the MoE experts over their row groups): a GEMM
// kind whose groups are small runs as one cuBLAS grouped GEMM (grouped_gemm.h) over the groups with
// rows, mapped onto column-major cuBLAS as MatmulForward and MatmulBackward map one linear layer
// (cuda_backend_layers.cpp); large groups, the f32 weight gradients (cuBLAS 13.0's grouped GEMM
// refuses bf16 inputs with an f32 output) and kinds cuBLAS refuses run the per-group cuBLASLt loop
// (Backend's default hooks).
#include <algorithm>

#include "model/cuda/cuda_backend.h"
#include "model/cuda/grouped_gemm.h"

namespace trainer {

namespace {

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
bool SmallGroups(const std::vector<cuda::GroupedGemmProblem>& problems) {
  if (problems.empty()) return false;
  double flops = 0;
  for (const cuda::GroupedGemmProblem& p : problems)
    flops += 2.0 * static_cast<double>(p.m) * p.n * p.k;
  constexpr double kMaxMeanFlops = 25e-6 * 700e12;
  return flops / static_cast<double>(problems.size()) <= kMaxMeanFlops;
}

}  // namespace

Status CudaBackend::LaunchGrouped(const cuda::GroupedGemmKind& kind,
                                  const std::vector<cuda::GroupedGemmProblem>& problems,
                                  bool* done) {
  *done = true;
  if (problems.empty()) return Status::Ok();
  *done = false;
  if (!SmallGroups(problems)) return Status::Ok();  // the per-group loop, not a fallback
  TRAINER_RETURN_IF_ERROR(grouped_gemm_->Run(kind, problems, done));
  ++(*done ? counts_.grouped_gemm : counts_.grouped_gemm_fallback);
  return Status::Ok();
}

Status CudaBackend::RunGroupedMatmulForward(Tensor out, Tensor in, Tensor weights,
                                            const std::vector<ExpertRun>& groups) {
  // out[R]^T (OC,n) = W_e (C,OC)^T in[R]^T (C,n).
  const int64_t OC = weights.dim(1), C = weights.dim(2);
  std::vector<cuda::GroupedGemmProblem>& problems = grouped_problems_;
  problems.clear();
  for (const ExpertRun& g : groups)
    if (g.rows > 0)
      problems.push_back({OC, g.rows, C, At(weights, g.expert * OC * C), C, At(in, g.offset * C), C,
                          At(out, g.offset * OC), OC, 0.f});
  bool done = false;
  TRAINER_RETURN_IF_ERROR(LaunchGrouped({true, false, compute_, compute_}, problems, &done));
  if (done) return Status::Ok();
  return Backend::RunGroupedMatmulForward(out, in, weights, groups);
}

Status CudaBackend::RunGroupedMatmulBackward(Tensor din, Tensor dweights, Tensor dout, Tensor in,
                                             Tensor weights, const std::vector<ExpertRun>& groups,
                                             GradientWrite dweights_write) {
  const int64_t E = weights.dim(0), OC = weights.dim(1), C = weights.dim(2);
  if (!din.empty()) {  // din[R]^T (C,n) = W_e (C,OC) dout[R]^T (OC,n)
    std::vector<cuda::GroupedGemmProblem>& problems = grouped_problems_;
  problems.clear();
    for (const ExpertRun& g : groups)
      if (g.rows > 0)
        problems.push_back({C, g.rows, OC, At(weights, g.expert * OC * C), C,
                            At(dout, g.offset * OC), OC, At(din, g.offset * C), C, 0.f});
    bool done = false;
    TRAINER_RETURN_IF_ERROR(LaunchGrouped({false, false, compute_, compute_}, problems, &done));
    if (!done)
      TRAINER_RETURN_IF_ERROR(Backend::RunGroupedMatmulBackward(din, Tensor(), dout, in, weights,
                                                                groups, dweights_write));
  }
  if (dweights.empty()) return Status::Ok();
  // dW_e^T (C,OC) (+)= in[R]^T (C,n) dout[R] (n,OC), in f32: the ragged dimension is k.
  // (bf16 inputs with an f32 output: cuBLAS 13.0's grouped GEMM refuses them, so the per-group
  // loop runs them without asking.)
  const std::vector<std::vector<ExpertRun>> waves =
      compute_ == DType::kF32 ? Waves(groups, E) : std::vector<std::vector<ExpertRun>>{};
  if (waves.empty())
    return Backend::RunGroupedMatmulBackward(Tensor(), dweights, dout, in, weights, groups,
                                             dweights_write);
  for (size_t w = 0; w < waves.size(); ++w) {
    const bool overwrite = w == 0 && dweights_write == GradientWrite::kOverwrite;
    std::vector<cuda::GroupedGemmProblem>& problems = grouped_problems_;
  problems.clear();
    for (const ExpertRun& g : waves[w])
      problems.push_back({C, OC, g.rows, At(in, g.offset * C), C, At(dout, g.offset * OC), OC,
                          At(dweights, g.expert * OC * C), C, overwrite ? 0.f : 1.f});
    bool done = false;
    TRAINER_RETURN_IF_ERROR(LaunchGrouped({false, true, compute_, DType::kF32}, problems, &done));
    if (done) continue;
    // Refused: this wave and the later ones by the per-group loop.
    std::vector<ExpertRun> rest;
    for (size_t v = w; v < waves.size(); ++v) rest.insert(rest.end(), waves[v].begin(), waves[v].end());
    return Backend::RunGroupedMatmulBackward(Tensor(), dweights, dout, in, weights, rest,
                                             w == 0 ? dweights_write : GradientWrite::kAccumulate);
  }
  return Status::Ok();
}

}  // namespace trainer
