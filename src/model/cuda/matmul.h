// CublasLtMatmul: column-major GEMMs through cuBLASLt with its epilogues (bias, GELU with the
// pre-activation as aux output, GELU gradient), f32 accumulation, one 32 MiB workspace allocated
// at creation, and descriptors plus the chosen algorithm cached per problem (the fastest of the
// heuristic's candidates for the problem, for its half and, with a bias, for it without the bias,
// timed on first use by the route policy, or pinned: op cublaslt_gemm of the route table).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "model/route_table.h"

namespace trainer {
namespace cuda {

enum class GemmEpilogue {
  kNone,
  kBias,         // D = AB + bias (bias of length m, broadcast over columns)
  kGeluAux,      // D = GELU(AB), aux = AB
  kGeluAuxBias,  // D = GELU(AB + bias), aux = AB + bias
  kDGelu,        // D = GELU'(aux) * AB, aux = the GELU's input (dtype of D)
};

struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::kBF16;
  int64_t ld = 0;
};

// D (m,n) = op(A) (m,k) op(B) (k,n) [+ beta C], column-major; C is D unless c is given (then
// with D's shape, dtype and leading dimension).
struct Gemm {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* d = nullptr;
  DType d_dtype = DType::kBF16;
  int64_t ldd = 0;
  float alpha = 1.f;  // D = alpha op(A) op(B) + beta C (+ bias)
  float beta = 0.f;
  const void* c = nullptr;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  void* bias = nullptr;  // bias input (kBias, kGeluAuxBias)
  DType bias_dtype = DType::kBF16;
  void* aux = nullptr;  // GELU pre-activation (output; input for kDGelu), dtype of D, ld aux_ld
  int64_t aux_ld = 0;
  // false: the heuristic's first algorithm for the size class (CublasLtMatmul::SizeClass), neither
  // timed nor recorded as a route (row groups whose sizes change every step,
  // Backend::SetRaggedGroups: no trial or query per new size, and the same choice on every rank).
  bool timed = true;
};

class CublasLtMatmul {
 public:
  static constexpr size_t kWorkspaceBytes = 32u << 20;

  static Status Create(cudaStream_t stream, std::unique_ptr<CublasLtMatmul>* out);
  ~CublasLtMatmul();
  CublasLtMatmul(const CublasLtMatmul&) = delete;
  CublasLtMatmul& operator=(const CublasLtMatmul&) = delete;

  // Enqueues the GEMM on the stream. *supported = false (and nothing runs) when cuBLASLt has no
  // algorithm for this problem, so that the caller can take another route.
  Status Run(const Gemm& gemm, bool* supported);

  // Routes (model/route_table.h): each problem's algorithm is op kRouteOp, named by its
  // configuration ("algo21.t20.s8.k1.r0.w0.c0.g0.i0"); `pins` (may be null) pins it, `chosen`
  // records it. Both outlive this object.
  static constexpr const char* kRouteOp = "cublaslt_gemm";
  static bool IsAlgoName(const std::string& name);
  void set_routes(const RouteTable* pins, RouteTable* chosen) { pins_ = pins, routes_ = chosen; }
  // Drops the plan of the problem the route table names `shape` (its next call builds it again,
  // taking the pins).
  void Forget(const std::string& shape);

 private:
  struct Plan;
  CublasLtMatmul() = default;
  Status BuildPlan(const Gemm& gemm, Plan* plan);
  Status FindPlan(const Gemm& gemm, Plan** plan);  // cached, or built
  cublasStatus_t Launch(const Gemm& gemm, const Plan& plan);
  static Gemm SizeClass(const Gemm& gemm);  // untimed GEMMs' plan sizes (see Run)
  cublasStatus_t AddHalfProblemCandidates(const Gemm& gemm, const Plan& plan,
                                          cublasLtMatmulPreference_t pref,
                                          cublasLtMatmulHeuristicResult_t* results, int* found);
  cublasStatus_t AddBiasFreeCandidates(const Gemm& gemm, const Plan& plan,
                                       cublasLtMatmulPreference_t pref,
                                       cublasLtMatmulHeuristicResult_t* results, int* found);
  void MergeCheckedCandidates(const Plan& plan, const cublasLtMatmulHeuristicResult_t* extra,
                              int extra_found, cublasLtMatmulHeuristicResult_t* results,
                              int* found);
  Status ChooseAlgo(const Gemm& gemm, Plan* plan, const cublasLtMatmulHeuristicResult_t* results,
                    int count);
  static std::string AlgoName(const cublasLtMatmulAlgo_t& algo);
  static std::string ShapeName(const Gemm& gemm);
  static constexpr int kCandidates = 16;

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;
  const RouteTable* pins_ = nullptr;
  RouteTable* routes_ = nullptr;
};

}  // namespace cuda
}  // namespace trainer
