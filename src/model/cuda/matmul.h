// CublasLtMatmul: column-major GEMMs through cuBLASLt with its epilogues (bias, GELU with the
// pre-activation as aux output, GELU gradient), f32 accumulation, one 32 MiB workspace allocated
// at creation, and descriptors plus the chosen algorithm cached per problem (the fastest of the
// heuristic's candidates for the problem, for its half and, with a bias, for it without the bias,
// timed on first use; rank 0 logs each problem's choice with its time and the runner-up's).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"

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
  float beta = 0.f;
  const void* c = nullptr;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  void* bias = nullptr;  // bias input (kBias, kGeluAuxBias)
  DType bias_dtype = DType::kBF16;
  void* aux = nullptr;  // GELU pre-activation (output; input for kDGelu), dtype of D, ld aux_ld
  int64_t aux_ld = 0;
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

 private:
  struct Plan;
  CublasLtMatmul() = default;
  Status BuildPlan(const Gemm& gemm, Plan* plan);
  cublasStatus_t AddHalfProblemCandidates(const Gemm& gemm, const Plan& plan,
                                          cublasLtMatmulPreference_t pref,
                                          cublasLtMatmulHeuristicResult_t* results, int* found);
  cublasStatus_t AddBiasFreeCandidates(const Gemm& gemm, const Plan& plan,
                                       cublasLtMatmulPreference_t pref,
                                       cublasLtMatmulHeuristicResult_t* results, int* found);
  void MergeCheckedCandidates(const Plan& plan, const cublasLtMatmulHeuristicResult_t* extra,
                              int extra_found, cublasLtMatmulHeuristicResult_t* results,
                              int* found);
  Status TimeCandidates(const Gemm& gemm, Plan* plan,
                        const cublasLtMatmulHeuristicResult_t* results, int count);
  static constexpr int kCandidates = 16;

  cublasLtHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;
};

}  // namespace cuda
}  // namespace trainer
