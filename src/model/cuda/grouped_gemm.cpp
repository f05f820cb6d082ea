// cuBLAS grouped GEMMs (see grouped_gemm.h): one group of one problem per GEMM, each with its own
// sizes, pointers and beta.
#include "model/cuda/grouped_gemm.h"

#include <climits>

#include "common/log.h"
#include "model/cuda/cuda_check.h"

namespace trainer {
namespace cuda {

namespace {

cudaDataType_t CudaType(DType t) {
  return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

bool FitsInt(int64_t v) {
  return v >= 0 && v <= INT_MAX;
}

}  // namespace

Status GroupedGemm::Create(cudaStream_t stream, std::unique_ptr<GroupedGemm>* out) {
  std::unique_ptr<GroupedGemm> g(new GroupedGemm());
  g->stream_ = stream;
  CUBLAS_CHECK(cublasCreate(&g->handle_));
  CUBLAS_CHECK(cublasSetStream(g->handle_, stream));
  CUBLAS_CHECK(cublasSetPointerMode(g->handle_, CUBLAS_POINTER_MODE_HOST));
  // 64 experts' worth, grown on first use of more.
  TRAINER_RETURN_IF_ERROR(UploadRing::Create(stream, 3 * 64 * sizeof(void*), &g->pointers_));
  *out = std::move(g);
  return Status::Ok();
}

GroupedGemm::~GroupedGemm() {
  pointers_.reset();  // waits for the stream
  if (handle_) cublasDestroy(handle_);
}

Status GroupedGemm::Run(const GroupedGemmKind& kind, const std::vector<GroupedGemmProblem>& problems,
                        bool* supported) {
  *supported = true;
  const size_t G = problems.size();
  if (G == 0) return Status::Ok();
  const std::vector<int64_t> key = {kind.transpose_a,     kind.transpose_b,
                                    (int64_t)kind.ab_dtype, (int64_t)kind.d_dtype,
                                    problems[0].lda,      problems[0].ldb,
                                    problems[0].ldd};
  bool fits = FitsInt(static_cast<int64_t>(G));
  for (const GroupedGemmProblem& p : problems)
    fits = fits && FitsInt(p.m) && FitsInt(p.n) && FitsInt(p.k) && FitsInt(p.lda) &&
           FitsInt(p.ldb) && FitsInt(p.ldd);
  if (!fits || refused_.count(key) != 0) {
    *supported = false;
    return Status::Ok();
  }
  // The pointers: [A of each problem | B of each | D of each].
  host_pointers_.resize(3 * G);
  const void** host = host_pointers_.data();
  transa_.assign(G, kind.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  transb_.assign(G, kind.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  m_.resize(G), n_.resize(G), k_.resize(G), lda_.resize(G), ldb_.resize(G), ldd_.resize(G);
  group_size_.assign(G, 1);
  alpha_.assign(G, 1.f);
  beta_.resize(G);
  for (size_t i = 0; i < G; ++i) {
    const GroupedGemmProblem& p = problems[i];
    host[i] = p.a, host[G + i] = p.b, host[2 * G + i] = p.d;
    m_[i] = static_cast<int>(p.m), n_[i] = static_cast<int>(p.n), k_[i] = static_cast<int>(p.k);
    lda_[i] = static_cast<int>(p.lda), ldb_[i] = static_cast<int>(p.ldb);
    ldd_[i] = static_cast<int>(p.ldd);
    beta_[i] = p.beta;
  }
  void* uploaded = nullptr;
  TRAINER_RETURN_IF_ERROR(pointers_->Upload(host, 3 * G * sizeof(void*), &uploaded));
  void** device = static_cast<void**>(uploaded);
  const cublasStatus_t status = cublasGemmGroupedBatchedEx(
      handle_, transa_.data(), transb_.data(), m_.data(), n_.data(), k_.data(), alpha_.data(),
      reinterpret_cast<const void* const*>(device), CudaType(kind.ab_dtype), lda_.data(),
      reinterpret_cast<const void* const*>(device + G), CudaType(kind.ab_dtype), ldb_.data(),
      beta_.data(), device + 2 * G, CudaType(kind.d_dtype), ldd_.data(), static_cast<int>(G),
      group_size_.data(), CUBLAS_COMPUTE_32F);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    refused_.insert(key);
    LogWarning(StrFormat("cuBLAS refused a grouped GEMM (%s%s, %s x %s -> %s, lda %lld, ldb %lld, "
                         "ldd %lld: %s); such GEMMs run one cuBLASLt call per group",
                         kind.transpose_a ? "A^T" : "A", kind.transpose_b ? " B^T" : " B",
                         DTypeName(kind.ab_dtype), DTypeName(kind.ab_dtype),
                         DTypeName(kind.d_dtype), (long long)problems[0].lda,
                         (long long)problems[0].ldb, (long long)problems[0].ldd,
                         cublasGetStatusName(status)));
    *supported = false;
    return Status::Ok();
  }
  CUBLAS_CHECK(status);
  return Status::Ok();
}

}  // namespace cuda
}  // namespace trainer
