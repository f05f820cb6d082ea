// cuBLASLt GEMMs with epilogues (see matmul.h). Each distinct problem (shapes, dtypes, epilogue,
// pointer alignments) gets its descriptors and algorithm once; later calls only set the pointers
// and run. The heuristic's candidates (for the problem, its half, and without the bias) are timed
// on the first call by the route policy (model/route_policy.h), or pinned by Engine.gpu_routes.
#include "model/cuda/matmul.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/route_trial.h"

namespace trainer {
namespace cuda {

struct CublasLtMatmul::Plan {
  bool supported = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::string shape;  // as the route table names it
  // The sizes the layouts describe now: a size class's plan runs each call at the call's own
  // sizes (Run), so they are those of the last call, not the class's.
  int64_t m = 0, n = 0, k = 0;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

cudaDataType_t CudaType(DType t) {
  return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Largest power of two (up to 256) that divides the address.
int64_t Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

const char* EpilogueName(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kBias:
      return "BIAS";
    case GemmEpilogue::kGeluAux:
      return "GELU_AUX";
    case GemmEpilogue::kGeluAuxBias:
      return "GELU_AUX_BIAS";
    case GemmEpilogue::kDGelu:
      return "DGELU";
    default:
      return "none";
  }
}

// An algorithm's route name: its configuration (algorithm, tile, stages, split-k, reduction,
// swizzle, custom option, cluster shape, inner shape), which is what tells two candidates apart.
std::string AlgoNameOf(const cublasLtMatmulAlgo_t& algo) {
  const cublasLtMatmulAlgoConfigAttributes_t attributes[] = {CUBLASLT_ALGO_CONFIG_ID,
                                                             CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                             CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                             CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                             CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                             CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                                             CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                             CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                             CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID};
  const char* tags[] = {"algo", "t", "s", "k", "r", "w", "c", "g", "i"};
  std::string name;
  for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); ++i) {
    // Each attribute has a size of its own (cuBLASLt refuses another): asked first, then read
    // into the low bytes of a zeroed 8-byte value (little-endian).
    uint64_t value = 0;
    size_t size = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attributes[i], nullptr, 0, &size) !=
            CUBLAS_STATUS_SUCCESS ||
        size == 0 || size > sizeof(value) ||
        cublasLtMatmulAlgoConfigGetAttribute(&algo, attributes[i], &value, size, &size) !=
            CUBLAS_STATUS_SUCCESS)
      value = 0;
    name += StrFormat("%s%s%llu", i ? "." : "", tags[i], (unsigned long long)value);
  }
  return name;
}

cublasLtEpilogue_t LtEpilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kGeluAux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmEpilogue::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool HasBias(GemmEpilogue e) {
  return e != GemmEpilogue::kNone && e != GemmEpilogue::kGeluAux && e != GemmEpilogue::kDGelu;
}
bool HasAux(GemmEpilogue e) {
  return e == GemmEpilogue::kGeluAux || e == GemmEpilogue::kGeluAuxBias ||
         e == GemmEpilogue::kDGelu;
}

std::vector<int64_t> PlanKey(const Gemm& g) {
  return {g.transpose_a,
          g.transpose_b,
          g.m,
          g.n,
          g.k,
          g.a.ld,
          g.b.ld,
          g.ldd,
          (int64_t)g.a.dtype,
          (int64_t)g.b.dtype,
          (int64_t)g.d_dtype,
          g.beta != 0.f,
          (int64_t)g.epilogue,
          (int64_t)g.bias_dtype,
          g.aux_ld,
          Alignment(g.a.data),
          Alignment(g.b.data),
          Alignment(g.d),
          Alignment(g.c ? g.c : g.d),
          Alignment(g.bias),
          Alignment(g.aux),
          g.timed};
}

}  // namespace

Status CublasLtMatmul::Create(cudaStream_t stream, std::unique_ptr<CublasLtMatmul>* out) {
  std::unique_ptr<CublasLtMatmul> m(new CublasLtMatmul());
  m->stream_ = stream;
  CUBLAS_CHECK(cublasLtCreate(&m->handle_));
  CUDA_CHECK(cudaMalloc(&m->workspace_, kWorkspaceBytes));
  *out = std::move(m);
  return Status::Ok();
}

CublasLtMatmul::~CublasLtMatmul() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

Status CublasLtMatmul::BuildPlan(const Gemm& g, Plan* plan) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epilogue = LtEpilogue(g.epilogue);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof(epilogue)));
  if (HasBias(g.epilogue)) {
    const int32_t bias_type = CudaType(g.bias_dtype);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &bias_type, sizeof(bias_type)));
    // The heuristic reads the pointers' alignment.
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &g.bias, sizeof(g.bias)));
  }
  if (HasAux(g.epilogue)) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                &g.aux_ld, sizeof(g.aux_ld)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)));
  }
  // Stored (before op) shapes: A is (k,m) when transposed, else (m,k); B likewise with n.
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CudaType(g.a.dtype), g.transpose_a ? g.k : g.m,
                                          g.transpose_a ? g.m : g.k, g.a.ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CudaType(g.b.dtype), g.transpose_b ? g.n : g.k,
                                          g.transpose_b ? g.k : g.n, g.b.ld));
  plan->m = g.m, plan->n = g.n, plan->k = g.k;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, CudaType(g.d_dtype), g.m, g.n, g.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t workspace = kWorkspaceBytes;
  const uint32_t align_a = Alignment(g.a.data), align_b = Alignment(g.b.data),
                 align_d = Alignment(g.d), align_c = Alignment(g.c ? g.c : g.d);
  cublasLtMatmulHeuristicResult_t results[3 * kCandidates] = {};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                  &align_a, sizeof(align_a));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                  &align_b, sizeof(align_b));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                  &align_c, sizeof(align_c));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                  &align_d, sizeof(align_d));
  if (status == CUBLAS_STATUS_SUCCESS) {
    // "Not supported" (or, for some epilogue and type combinations, "invalid value") here means
    // no algorithm fits: the caller takes another route.
    const cublasStatus_t heuristic =
        cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                       pref, kCandidates, results, &found);
    if (heuristic != CUBLAS_STATUS_SUCCESS) found = 0;
    if (heuristic != CUBLAS_STATUS_SUCCESS && heuristic != CUBLAS_STATUS_NOT_SUPPORTED &&
        heuristic != CUBLAS_STATUS_INVALID_VALUE)
      status = heuristic;
  }
  if (status == CUBLAS_STATUS_SUCCESS && found > 0)
    status = AddHalfProblemCandidates(g, *plan, pref, results, &found);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0)
    status = AddBiasFreeCandidates(g, *plan, pref, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(status);
  plan->supported = found > 0;
  if (!plan->supported) return Status::Ok();
  plan->algo = results[0].algo;
  TRAINER_RETURN_IF_ERROR(ChooseAlgo(g, plan, results, found));
  return Status::Ok();
}

// Appends the `extra` candidates that are not in results[0, *found) yet and that
// cublasLtMatmulAlgoCheck accepts for the plan's own problem within the workspace.
void CublasLtMatmul::MergeCheckedCandidates(const Plan& plan,
                                            const cublasLtMatmulHeuristicResult_t* extra,
                                            int extra_found,
                                            cublasLtMatmulHeuristicResult_t* results, int* found) {
  for (int i = 0; i < extra_found; ++i) {
    bool known = false;
    for (int j = 0; j < *found && !known; ++j)
      known = std::memcmp(&results[j].algo, &extra[i].algo, sizeof(extra[i].algo)) == 0;
    cublasLtMatmulHeuristicResult_t check = {};
    if (known ||
        cublasLtMatmulAlgoCheck(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, &extra[i].algo,
                                &check) != CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > kWorkspaceBytes)
      continue;
    results[(*found)++] = extra[i];
  }
}

// The heuristic proposes other kernels as a problem grows, and can leave out the one that runs it
// fastest: for 350M's GELU-gradient GEMM at 32768 tokens it offered an SM80 kernel (717 us) but
// not the SM90 kernel it offers at 16384 tokens (223 us there). So the candidates it proposes for
// the problem with its larger output dimension halved join the list (up to kCandidates more),
// each checked to run the whole problem within the workspace; timing then decides.
cublasStatus_t CublasLtMatmul::AddHalfProblemCandidates(const Gemm& g, const Plan& plan,
                                                        cublasLtMatmulPreference_t pref,
                                                        cublasLtMatmulHeuristicResult_t* results,
                                                        int* found) {
  const bool half_n = g.n >= g.m;
  const int64_t m = half_n ? g.m : g.m / 2, n = half_n ? g.n / 2 : g.n;
  if (m < 1 || n < 1) return CUBLAS_STATUS_SUCCESS;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasStatus_t status = cublasLtMatrixLayoutCreate(
      &a, CudaType(g.a.dtype), g.transpose_a ? g.k : m, g.transpose_a ? m : g.k, g.a.ld);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatrixLayoutCreate(&b, CudaType(g.b.dtype), g.transpose_b ? n : g.k,
                                        g.transpose_b ? g.k : n, g.b.ld);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatrixLayoutCreate(&d, CudaType(g.d_dtype), m, n, g.ldd);
  cublasLtMatmulHeuristicResult_t half[kCandidates] = {};
  int half_found = 0;
  if (status == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, a, b, d, d, pref, kCandidates, half,
                                     &half_found) != CUBLAS_STATUS_SUCCESS)
    half_found = 0;
  MergeCheckedCandidates(plan, half, half_found, results, found);
  for (cublasLtMatrixLayout_t layout : {a, b, d})
    if (layout) cublasLtMatrixLayoutDestroy(layout);
  return status;
}

// With the bias epilogue, the heuristic's list leaves out tile shapes it proposes for the same
// GEMM without it: for the forward GEMMs of the qkv projection a 128 x 160 tile, 10-12% faster
// under load than the 256 x 128 tile it proposes with the bias (350M and 1.3B). Those candidates
// join the list where cublasLtMatmulAlgoCheck accepts them with the bias; timing then decides.
// Not for the GELU epilogues: for DGELU this brought in a variant that is faster idle and 7%
// slower under load (1.3B).
cublasStatus_t CublasLtMatmul::AddBiasFreeCandidates(const Gemm& g, const Plan& plan,
                                                     cublasLtMatmulPreference_t pref,
                                                     cublasLtMatmulHeuristicResult_t* results,
                                                     int* found) {
  if (g.epilogue != GemmEpilogue::kBias) return CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasStatus_t status = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
  cublasLtMatmulHeuristicResult_t plain[kCandidates] = {};
  int plain_found = 0;
  if (status == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulAlgoGetHeuristic(handle_, desc, plan.a, plan.b, plan.d, plan.d, pref,
                                     kCandidates, plain, &plain_found) != CUBLAS_STATUS_SUCCESS)
    plain_found = 0;
  MergeCheckedCandidates(plan, plain, plain_found, results, found);
  if (desc) cublasLtMatmulDescDestroy(desc);
  return status;
}

// The route policy (model/route_policy.h) over the candidate algorithms, on the problem's own
// operands, or the algorithm Engine.gpu_routes pins: the heuristic's first choice is 0-14% off the
// best on GPT shapes. The turns run back to back on the first call, so that the host's work per
// launch (cuBLASLt's, ~20-45 us on an H200 host) overlaps the GPU's.
Status CublasLtMatmul::ChooseAlgo(const Gemm& g, Plan* plan,
                                  const cublasLtMatmulHeuristicResult_t* results, int count) {
  // Names by configuration; a configuration met again (candidates for the half or bias-free
  // problem can differ from one of the problem's in opaque fields only) gets ".d<n>".
  std::vector<std::string> names(count);
  for (int i = 0; i < count; ++i) {
    names[i] = AlgoName(results[i].algo);
    const int repeats = static_cast<int>(std::count(names.begin(), names.begin() + i, names[i]));
    if (repeats > 0) names[i] += StrFormat(".d%d", repeats);
  }
  const std::string shape = ShapeName(g);
  plan->shape = shape;
  if (!g.timed) {
    plan->algo = results[0].algo;
    return Status::Ok();
  }
  RouteTrial trial(count);
  int pinned = -1;
  bool untimed = false;  // no memory for the copy of D the trial needs: the heuristic's first
  if (pins_ != nullptr)
    TRAINER_RETURN_IF_ERROR(
        pins_->PinnedChoice(kRouteOp, shape, names, std::vector<bool>(count, true), &pinned));
  if (pinned >= 0) {
    trial.Pin(pinned);
  } else if (count > 1) {
    // D is read when beta != 0: keep a copy so that the trial runs leave it as they found it.
    // Its extent ends with its last column's m elements (D may be a block of a wider matrix).
    // The copy is made outside the planned memory, once per shape and freed at once; where it
    // does not fit, the GEMM runs untimed rather than the step failing.
    const size_t d_bytes =
        ((size_t)g.ldd * (g.n - 1) + g.m) * (g.d_dtype == DType::kBF16 ? 2 : 4);
    void* saved = nullptr;
    if (g.beta != 0.f && (g.c == nullptr || g.c == g.d)) {
      const cudaError_t allocated = cudaMalloc(&saved, d_bytes);
      if (allocated == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // a failed allocation is not sticky: clear it
        saved = nullptr;
        untimed = true;
      } else {
        CUDA_CHECK(allocated);
        CUDA_CHECK(cudaMemcpyAsync(saved, g.d, d_bytes, cudaMemcpyDeviceToDevice, stream_));
      }
    }
    const std::unique_ptr<void, cudaError_t (*)(void*)> copy(saved, cudaFree);
    const float alpha = g.alpha, beta = g.beta;
    auto launch = [&](int i) {
      return cublasLtMatmul(handle_, plan->desc, &alpha, g.a.data, plan->a, g.b.data, plan->b,
                            &beta, g.c ? g.c : g.d, plan->d, g.d, plan->d, &results[i].algo,
                            workspace_, kWorkspaceBytes, stream_) == CUBLAS_STATUS_SUCCESS;
    };
    if (!untimed) TRAINER_RETURN_IF_ERROR(trial.RunToEnd(stream_, launch));
    if (saved) {
      CUDA_CHECK(cudaMemcpyAsync(g.d, saved, d_bytes, cudaMemcpyDeviceToDevice, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }
  const int choice = count == 1 || untimed ? 0 : std::max(trial.choice(), 0);
  plan->algo = results[choice].algo;
  if (routes_ != nullptr) {
    RouteEntry entry = trial.Entry(kRouteOp, shape, names);
    if (count == 1 && pinned < 0) entry.chosen = 0, entry.how = "only";
    if (untimed) entry.chosen = 0, entry.how = "untimed";
    routes_->Record(std::move(entry));
  }
  return Status::Ok();
}

std::string CublasLtMatmul::AlgoName(const cublasLtMatmulAlgo_t& algo) {
  return AlgoNameOf(algo);
}

bool CublasLtMatmul::IsAlgoName(const std::string& name) {
  unsigned long long v[10];
  int length = -1;
  if (std::sscanf(name.c_str(), "algo%llu.t%llu.s%llu.k%llu.r%llu.w%llu.c%llu.g%llu.i%llu%n", &v[0],
                  &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &length) != 9 ||
      length < 0)
    return false;
  const std::string rest = name.substr(length);  // "" or a repeat's ".d<n>"
  char end = 0;
  return rest.empty() || std::sscanf(rest.c_str(), ".d%llu%c", &v[9], &end) == 1;
}

// The problem as the route table names it: every field of its plan key.
std::string CublasLtMatmul::ShapeName(const Gemm& g) {
  const std::vector<int64_t> key = PlanKey(g);
  std::string text =
      StrFormat("%lldx%lldx%lld%s%s %s", (long long)g.m, (long long)g.n, (long long)g.k,
                g.transpose_a ? " A^T" : "", g.transpose_b ? " B^T" : "", EpilogueName(g.epilogue));
  for (size_t i = 0; i < key.size(); ++i)
    text += StrFormat("%s%lld", i ? "," : " key=", (long long)key[i]);
  return text;
}

void CublasLtMatmul::Forget(const std::string& shape) {
  for (auto it = plans_.begin(); it != plans_.end(); ++it) {
    if (it->second->shape == shape) {
      plans_.erase(it);
      return;
    }
  }
}

// Row groups (untimed GEMMs, Backend::SetRaggedGroups) change sizes every step. Their plans are
// kept per size class (each dimension rounded up to a power of two) and the class's algorithm runs
// at the call's own sizes, the layouts resized in place: a new size costs no heuristic query (a
// few hundred microseconds of host time, with the GPU idle). A size the class's algorithm refuses
// gets its exact plan.
Gemm CublasLtMatmul::SizeClass(const Gemm& g) {
  if (g.timed) return g;
  auto up = [](int64_t v) {
    int64_t p = 1;
    while (p < v) p *= 2;
    return p;
  };
  Gemm c = g;
  c.m = up(g.m), c.n = up(g.n), c.k = up(g.k);
  const bool fits = (c.transpose_a ? c.k : c.m) <= c.a.ld && (c.transpose_b ? c.n : c.k) <= c.b.ld &&
                    c.m <= c.ldd && (!HasAux(c.epilogue) || c.m <= c.aux_ld);
  return fits ? c : g;
}

Status CublasLtMatmul::FindPlan(const Gemm& g, Plan** plan) {
  std::vector<int64_t> key = PlanKey(g);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto built = std::make_unique<Plan>();
    TRAINER_RETURN_IF_ERROR(BuildPlan(g, built.get()));
    it = plans_.emplace(std::move(key), std::move(built)).first;
  }
  *plan = it->second.get();
  return Status::Ok();
}

Status CublasLtMatmul::Run(const Gemm& g, bool* supported) {
  const Gemm size_class = SizeClass(g);
  const bool resized = size_class.m != g.m || size_class.n != g.n || size_class.k != g.k;
  Plan* plan = nullptr;
  TRAINER_RETURN_IF_ERROR(FindPlan(size_class, &plan));
  *supported = plan->supported;
  if (!plan->supported && !resized) return Status::Ok();
  // The layouts at the call's sizes, wherever they differ from the last call's: a call at the
  // class's own sizes after a smaller one of the class must not run at the smaller one's.
  if (plan->supported && (plan->m != g.m || plan->n != g.n || plan->k != g.k)) {
    auto resize = [](cublasLtMatrixLayout_t layout, int64_t rows, int64_t cols) {
      const uint64_t r = rows, c = cols;
      cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_ROWS, &r,
                                                          sizeof(r));
      if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &c, sizeof(c));
      return s;
    };
    CUBLAS_CHECK(resize(plan->a, g.transpose_a ? g.k : g.m, g.transpose_a ? g.m : g.k));
    CUBLAS_CHECK(resize(plan->b, g.transpose_b ? g.n : g.k, g.transpose_b ? g.k : g.n));
    CUBLAS_CHECK(resize(plan->d, g.m, g.n));
    plan->m = g.m, plan->n = g.n, plan->k = g.k;
  }
  cublasStatus_t status = plan->supported ? Launch(g, *plan) : CUBLAS_STATUS_NOT_SUPPORTED;
  if (resized && status == CUBLAS_STATUS_NOT_SUPPORTED) {
    TRAINER_RETURN_IF_ERROR(FindPlan(g, &plan));
    *supported = plan->supported;
    if (!plan->supported) return Status::Ok();
    status = Launch(g, *plan);
  }
  CUBLAS_CHECK(status);
  return Status::Ok();
}

cublasStatus_t CublasLtMatmul::Launch(const Gemm& g, const Plan& plan) {
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (HasBias(g.epilogue))
    s = cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                       sizeof(g.bias));
  if (s == CUBLAS_STATUS_SUCCESS && HasAux(g.epilogue))
    s = cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                       sizeof(g.aux));
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const float alpha = g.alpha, beta = g.beta;
  const void* c = g.c ? g.c : g.d;
  return cublasLtMatmul(handle_, plan.desc, &alpha, g.a.data, plan.a, g.b.data, plan.b, &beta, c,
                        plan.d, g.d, plan.d, &plan.algo, workspace_, kWorkspaceBytes, stream_);
}

}  // namespace cuda
}  // namespace trainer
