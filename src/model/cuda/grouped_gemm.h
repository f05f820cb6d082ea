// GroupedGemm: many column-major GEMMs of one kind (transposes and dtypes) but their own sizes
// and pointers in one launch, through cuBLAS's cublasGemmGroupedBatchedEx (f32 accumulation):
// the MoE experts over their row groups (CudaBackend::RunGroupedMatmul*). The per-problem pointer
// arrays go to the device with one stream-ordered copy per call (upload_ring.h).
// A kind and leading dimensions cuBLAS refuses are remembered: later calls say "unsupported" at
// once and the caller takes its per-problem route.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "common/status.h"
#include "common/tensor.h"
#include "model/cuda/upload_ring.h"

namespace trainer {
namespace cuda {

// The kind of the GEMMs of one call: D (m,n) = op(A) (m,k) op(B) (k,n) [+ beta D].
struct GroupedGemmKind {
  bool transpose_a = false;
  bool transpose_b = false;
  DType ab_dtype = DType::kBF16;  // A and B
  DType d_dtype = DType::kBF16;   // D (and C, which is D)
};

// One GEMM of a call (column-major; stored shapes as cuBLAS's: A (m,k) or, transposed, (k,m)).
struct GroupedGemmProblem {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  float beta = 0.f;  // 0: D overwritten, 1: accumulated
};

class GroupedGemm {
 public:
  static Status Create(cudaStream_t stream, std::unique_ptr<GroupedGemm>* out);
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;

  // Enqueues every problem (k > 0, m > 0, n > 0) in one launch. *supported = false (nothing
  // runs) when cuBLAS refuses the kind or a size does not fit its int arguments.
  Status Run(const GroupedGemmKind& kind, const std::vector<GroupedGemmProblem>& problems,
             bool* supported);

 private:
  GroupedGemm() = default;

  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<UploadRing> pointers_;    // the per-problem pointer arrays, to the device
  std::vector<const void*> host_pointers_;  // a call's: [A of each | B of each | D of each]
  std::set<std::vector<int64_t>> refused_;   // kinds (with leading dimensions) cuBLAS refused
  // The host arrays of a call (cuBLAS reads them during the call).
  std::vector<cublasOperation_t> transa_, transb_;
  std::vector<int> m_, n_, k_, lda_, ldb_, ldd_, group_size_;
  std::vector<float> alpha_, beta_;
};

}  // namespace cuda
}  // namespace trainer
