// CudaBackend: creation (device, stream, cuBLASLt and cuDNN handles), memory, copies,
// elementwise ops and the optimizer ops; MakeCudaBackend and CudaBackendCompiled. The layer ops
// are in cuda_backend_layers.cpp.
#include "model/cuda/cuda_backend.h"

#include <cuda_profiler_api.h>

#include <cmath>
#include <cstring>

#include "model/cuda/attention_cudnn.h"
#include "model/cuda/cuda_check.h"
#include "model/cuda/kernels.h"
#include "model/cuda/grouped_gemm.h"
#include "model/cuda/matmul.h"
#include "model/cuda/matmul_gelu_cudnn.h"
#include "model/cuda/op_checks.h"

namespace trainer {

using cuda::Where;

CudaBackend::CudaBackend(int device, DType compute) : device_(device), compute_(compute) {}

Status CudaBackend::Create(int device, DType compute, std::unique_ptr<CudaBackend>* out) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the error so later CUDA calls do not report it
    return EnvironmentError(
        StrFormat("no CUDA device visible (%s): cudaGetDeviceCount found %d device(s)%s%s. Set "
                  "Global.device=cpu, or run on a GPU node with a working driver (check "
                  "CUDA_VISIBLE_DEVICES)",
                  Where().c_str(), count, e != cudaSuccess ? " and returned " : "",
                  e != cudaSuccess ? cudaGetErrorString(e) : ""));
  }
  if (device < 0 || device >= count)
    return EnvironmentError(StrFormat(
        "CUDA device %d does not exist (%s): %d device(s) visible. Check the GPU binding of "
        "the ranks on this node (one rank per GPU) and CUDA_VISIBLE_DEVICES",
        device, Where().c_str(), count));
  if (compute != DType::kBF16 && compute != DType::kF32)
    return UsageError(
        StrFormat("CUDA backend compute dtype (%s): %s is not supported. Use bf16 "
                  "or f32",
                  Where().c_str(), DTypeName(compute)));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device, compute));
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking));
  TRAINER_RETURN_IF_ERROR(cuda::CublasLtMatmul::Create(backend->stream_, &backend->matmul_));
  backend->matmul_->set_routes(&backend->pins_, &backend->routes_);
  TRAINER_RETURN_IF_ERROR(cuda::GroupedGemm::Create(backend->stream_, &backend->grouped_gemm_));
  if (cuda::CudnnAttention::Compiled()) {
    const Status cudnn = cuda::CudnnAttention::Create(backend->stream_, &backend->cudnn_attention_);
    if (!cudnn.ok())  // a missing or broken cuDNN costs speed, not the run
      LogWarning(cudnn.message() + "; attention uses the slower fallback kernels");
    // Without it the GELU GEMMs stay on cuBLASLt (the attention's warning covers a broken cuDNN).
    if (!cuda::CudnnGeluMatmul::Create(backend->stream_, &backend->cudnn_gelu_matmul_).ok())
      backend->cudnn_gelu_matmul_.reset();
    else
      backend->cudnn_gelu_matmul_->set_routes(&backend->pins_, &backend->routes_);
  }
  CUDA_CHECK(cudaMalloc(&backend->scratch_, kInitialScratchBytes));
  backend->scratch_bytes_ = kInitialScratchBytes;
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&backend->staging_), 2 * kStagingSlotBytes));
  for (cudaEvent_t& event : backend->staging_free_)
    CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  *out = std::move(backend);
  return Status::Ok();
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  cudnn_attention_.reset();
  cudnn_gelu_matmul_.reset();
  matmul_.reset();
  grouped_gemm_.reset();
  grouped_upload_.reset();
  for (cudaEvent_t event : staging_free_)
    if (event) cudaEventDestroy(event);
  for (cudaEvent_t event : marks_)
    if (event) cudaEventDestroy(event);
  for (cudaEvent_t event : copy_marks_)
    if (event) cudaEventDestroy(event);
  if (staging_) cudaFreeHost(staging_);
  if (scratch_) cudaFree(scratch_);
  if (arena_) cudaFree(arena_);
  if (stream_) cudaStreamDestroy(stream_);
}

bool CudaBackend::CudnnAttentionCompiled() {
  return cuda::CudnnAttention::Compiled();
}

std::string CudaBackend::name() const {
  return "cuda:" + std::to_string(device_);
}

Status CudaBackend::Scratch(size_t bytes, void** out) {
  if (bytes > scratch_bytes_) {
    // Only the first use of a larger shape gets here (the first step), never the steady state.
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier ops may still read the old buffer
    CUDA_CHECK(cudaFree(scratch_));
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    const size_t rounded = (bytes + (1u << 20) - 1) & ~static_cast<size_t>((1u << 20) - 1);
    CUDA_CHECK(cudaMalloc(&scratch_, rounded));
    scratch_bytes_ = rounded;
  }
  *out = scratch_;
  return Status::Ok();
}

// ---- memory ----

Status CudaBackend::ReserveArena(size_t bytes) {
  if (arena_ != nullptr || bytes == 0) return Status::Ok();
  void* arena = nullptr;
  TRAINER_RETURN_IF_ERROR(Allocate(bytes, &arena));  // cudaMalloc + zero fill
  arena_ = static_cast<char*>(arena);
  arena_size_ = bytes;
  arena_used_ = 0;
  return Status::Ok();
}

Status CudaBackend::Allocate(size_t bytes, void** out) {
  *out = nullptr;
  if (bytes == 0) return Status::Ok();
  const size_t rounded = AllocationSize(bytes);
  if (arena_ != nullptr && arena_used_ + rounded <= arena_size_) {  // zero-filled at reservation
    *out = arena_ + arena_used_;
    arena_used_ += rounded;
    return Status::Ok();
  }
  const cudaError_t e = cudaMalloc(out, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    return RuntimeError(StrFormat(
        "GPU memory allocation of %.1f MiB (%s, %s): %s with %.1f of %.1f GiB free. Lower "
        "Global.micro_batch_size, use recompute, or spread the model over more GPUs (tp/pp); "
        "`trainer plan` prints what a config needs per GPU",
        bytes / 1048576.0, name().c_str(), Where().c_str(), cudaGetErrorString(e),
        free_bytes / 1073741824.0, total_bytes / 1073741824.0));
  }
  CUDA_CHECK(cudaMemsetAsync(*out, 0, bytes, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

void CudaBackend::Free(void* ptr) {
  if (ptr == nullptr) return;
  const char* p = static_cast<const char*>(ptr);
  if (arena_ != nullptr && p >= arena_ && p < arena_ + arena_size_) return;  // the arena's
  cudaStreamSynchronize(stream_);
  cudaFree(ptr);
}

Status CudaBackend::CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  if (bytes > kStagingSlotBytes) {  // large copies happen at setup: plain and synchronous
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }
  const int slot = staging_next_;
  staging_next_ ^= 1;
  char* staging = staging_ + slot * kStagingSlotBytes;
  CUDA_CHECK(cudaEventSynchronize(staging_free_[slot]));  // the copy two calls ago is done
  std::memcpy(staging, host_src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(staging_free_[slot], stream_));
  return Status::Ok();
}

Status CudaBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

Status CudaBackend::CopyDeviceToDevice(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  return Status::Ok();
}

// ---- host staging (the offloaded optimizer's ring) ----

Status CudaBackend::AllocateHost(size_t bytes, void** out) {
  *out = nullptr;
  if (bytes == 0) return Status::Ok();
  if (cudaHostAlloc(out, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    *out = nullptr;
    return RuntimeError(
        StrFormat("page-locked host allocation of %zu bytes failed (%s): the host is out of "
                  "memory or its locked-memory limit (ulimit -l) is too low",
                  bytes, name().c_str()));
  }
  std::memset(*out, 0, bytes);
  return Status::Ok();
}

void CudaBackend::FreeHost(void* ptr) {
  if (ptr == nullptr) return;
  cudaStreamSynchronize(stream_);  // no copy still reads or writes it
  cudaFreeHost(ptr);
}

Status CudaBackend::CopyToHostAsync(void* host_dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  return Status::Ok();
}

Status CudaBackend::CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  return Status::Ok();
}

Status CudaBackend::RecordCopies(int mark) {
  if (mark < 0 || mark >= kMaxCopyMarks)
    return RuntimeError("CudaBackend::RecordCopies: mark out of range");
  if (copy_marks_[mark] == nullptr)
    CUDA_CHECK(cudaEventCreateWithFlags(&copy_marks_[mark], cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(copy_marks_[mark], stream_));
  return Status::Ok();
}

Status CudaBackend::WaitForCopies(int mark) {
  if (mark < 0 || mark >= kMaxCopyMarks || copy_marks_[mark] == nullptr)
    return RuntimeError("CudaBackend::WaitForCopies: mark not recorded");
  CUDA_CHECK(cudaEventSynchronize(copy_marks_[mark]));
  return Status::Ok();
}

Status CudaBackend::Zero(Tensor t) {
  if (t.empty()) return Status::Ok();
  CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
  return Status::Ok();
}

Status CudaBackend::RunConvert(Tensor dst, Tensor src) {
  CUDA_CHECK(cuda::LaunchConvert(dst.dtype, dst.data, src.dtype, src.data, src.numel(), stream_));
  return Status::Ok();
}

Status CudaBackend::Synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

Status CudaBackend::ProfilerRange(bool start) {
  CUDA_CHECK(start ? cudaProfilerStart() : cudaProfilerStop());
  return Status::Ok();
}

Status CudaBackend::Mark(int index) {
  if (index < 0 || index >= kMaxMarks) return RuntimeError("CudaBackend::Mark: index out of range");
  if (marks_[index] == nullptr) CUDA_CHECK(cudaEventCreate(&marks_[index]));  // first profiled step
  CUDA_CHECK(cudaEventRecord(marks_[index], stream_));
  return Status::Ok();
}

Status CudaBackend::SecondsBetween(int from, int to, double* seconds) {
  if (from < 0 || to < 0 || from >= kMaxMarks || to >= kMaxMarks || !marks_[from] || !marks_[to])
    return RuntimeError("CudaBackend::SecondsBetween: mark not recorded");
  CUDA_CHECK(cudaEventSynchronize(marks_[to]));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[from], marks_[to]));
  *seconds = ms * 1e-3;
  return Status::Ok();
}

// ---- elementwise ----

Status CudaBackend::RunAdd(Tensor out, Tensor a, Tensor b) {
  CUDA_CHECK(cuda::LaunchAdd(out.dtype, out.data, a.data, b.data, out.numel(), stream_));
  return Status::Ok();
}

Status CudaBackend::RunAddInPlace(Tensor out, Tensor a) {
  return RunAdd(out, out, a);
}

Status CudaBackend::RunScale(Tensor x, float s) {
  CUDA_CHECK(cuda::LaunchScale(x.dtype, x.data, s, x.numel(), stream_));
  return Status::Ok();
}

// ---- optimizer ----

Status CudaBackend::RunAdamW(Tensor param, Tensor master, Tensor grad, Tensor m, Tensor v,
                             const AdamWParams& p) {
  const int64_t n = master.numel();
  cuda::AdamWStep step{p.lr,
                       p.beta1,
                       p.beta2,
                       p.eps,
                       p.weight_decay,
                       p.grad_scale,
                       static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), p.step)),
                       static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), p.step)),
                       p.grad_sum_squares,
                       p.max_grad_norm};
  if (master.dtype == DType::kU16)
    CUDA_CHECK(cuda::LaunchAdamWHalves(param.as<uint16_t>(), master.as<uint16_t>(),
                                       grad.as<float>(), m.as<float>(), v.as<float>(), n, step,
                                       stream_));
  else
    CUDA_CHECK(cuda::LaunchAdamW(param.dtype, param.data, master.as<float>(), grad.as<float>(),
                                 m.as<float>(), v.as<float>(), n, step, stream_));
  return Status::Ok();
}

Status CudaBackend::RunMasterHalves(Tensor master, Tensor param, Tensor remainder, bool join) {
  CUDA_CHECK(cuda::LaunchMasterHalves(master.as<float>(), param.as<uint16_t>(),
                                      remainder.as<uint16_t>(), master.numel(), join, stream_));
  return Status::Ok();
}

Status CudaBackend::RunSumInto(Tensor total, Tensor x, SumOf what, bool accumulate) {
  void* scratch = nullptr;
  TRAINER_RETURN_IF_ERROR(Scratch(cuda::kSumSquaresPartials * sizeof(double), &scratch));
  CUDA_CHECK(cuda::LaunchSum(x.as<float>(), x.numel(), what == SumOf::kSquares, accumulate,
                             static_cast<double*>(scratch), total.as<double>(), stream_));
  return Status::Ok();
}

// ---- factory (declared in model/backend.h) ----

Status MakeCudaBackend(int device, std::unique_ptr<Backend>* out, DType compute) {
  out->reset();
  std::unique_ptr<CudaBackend> backend;
  TRAINER_RETURN_IF_ERROR(CudaBackend::Create(device, compute, &backend));
  *out = std::move(backend);
  return Status::Ok();
}

bool CudaBackendCompiled() {
  return true;
}

}  // namespace trainer
