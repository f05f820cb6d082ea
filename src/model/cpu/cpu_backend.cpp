// CpuBackend's class-level pieces: host memory (256-byte aligned, zero-filled), copies, Zero,
// Convert, the elementwise ops (Add, AddInPlace, Scale) with their kernels, and MakeCpuBackend().
// The ops' contracts are checked by Backend before the Run* hooks here.
#include "model/cpu/cpu_backend.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {

// ---- kernels ----
namespace cpu {

void add(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* out, const float* a, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] += a[i];
}

void scale(float* x, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace cpu

// ---- memory ----
// From this size on, an allocation is fresh pages of its own from the kernel (mmap): zero
// already, and resident only as they are first written, so that an offloaded optimizer's
// moments take no memory before the first step (while the initial weights are still held).
constexpr size_t kMappedBytes = size_t{64} << 20;

namespace {
// fn(offset, bytes) over [0, bytes) in 16 MiB pieces, on every core from 64 MiB on (an 8B model's
// offloaded master weights are 32 GB to clear and fill at setup; one core writes fresh pages at
// a few GB/s).
constexpr size_t kParallelPiece = size_t{16} << 20, kParallelFrom = size_t{64} << 20;
template <typename Fn>
void InPieces(size_t bytes, Fn fn) {
  const size_t pieces = (bytes + kParallelPiece - 1) / kParallelPiece;
#pragma omp parallel for schedule(static) if (bytes >= kParallelFrom)
  for (size_t i = 0; i < pieces; ++i)
    fn(i * kParallelPiece, std::min(kParallelPiece, bytes - i * kParallelPiece));
}
void Move(void* dst, const void* src, size_t bytes) {
  char* to = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  if (from + bytes > to && to + bytes > from) {  // overlapping: one memmove
    std::memmove(dst, src, bytes);
    return;
  }
  InPieces(bytes, [&](size_t at, size_t n) { std::memcpy(to + at, from + at, n); });
}
void Clear(void* dst, size_t bytes) {
  InPieces(bytes, [&](size_t at, size_t n) { std::memset(static_cast<char*>(dst) + at, 0, n); });
}
}  // namespace

Status CpuBackend::Allocate(size_t bytes, void** out) {
  constexpr size_t kAlignment = 256;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = nullptr;
  bool failed = false;
  if (rounded >= kMappedBytes) {
    ptr = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    failed = ptr == MAP_FAILED;
  } else {
    failed = posix_memalign(&ptr, kAlignment, rounded > 0 ? rounded : kAlignment) != 0;
    if (!failed) std::memset(ptr, 0, rounded);
  }
  if (failed) {
    *out = nullptr;
    return RuntimeError(
        StrFormat("host allocation of %zu bytes failed (cpu backend, rank %d): "
                  "out of memory. Lower Global.micro_batch_size or the model size",
                  bytes, GetProcessIdentity().rank));
  }
  *out = ptr;
  std::lock_guard<std::mutex> lock(allocation_mutex_);
  allocated_[ptr] = rounded;
  in_use_ += rounded;
  peak_ = std::max(peak_, in_use_);
  return Status::Ok();
}

void CpuBackend::Free(void* ptr) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(allocation_mutex_);
    auto it = allocated_.find(ptr);
    if (it != allocated_.end()) {
      bytes = it->second;
      in_use_ -= bytes;
      allocated_.erase(it);
    }
  }
  if (bytes >= kMappedBytes)
    munmap(ptr, bytes);
  else
    std::free(ptr);
}

size_t CpuBackend::PeakAllocatedBytes() const {
  std::lock_guard<std::mutex> lock(allocation_mutex_);
  return peak_;
}

Status CpuBackend::CopyToDevice(void* dst, const void* host_src, size_t bytes) {
  if (bytes > 0 && dst != host_src) Move(dst, host_src, bytes);
  return Status::Ok();
}

Status CpuBackend::CopyToHost(void* host_dst, const void* src, size_t bytes) {
  return CopyToDevice(host_dst, src, bytes);
}

Status CpuBackend::CopyDeviceToDevice(void* dst, const void* src, size_t bytes) {
  return CopyToDevice(dst, src, bytes);
}

Status CpuBackend::Zero(Tensor t) {
  if (!t.empty()) Clear(t.data, t.bytes());
  return Status::Ok();
}

Status CpuBackend::RunConvert(Tensor dst, Tensor src) {
  const size_t n = static_cast<size_t>(src.numel());
  if (dst.dtype == src.dtype) return CopyToDevice(dst.data, src.data, src.bytes());
  if (dst.dtype == DType::kBF16 && src.dtype == DType::kF32) {
    uint16_t* d = dst.as<uint16_t>();
    const float* s = src.as<float>();
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 16))
    for (size_t i = 0; i < n; ++i) d[i] = FloatToBF16(s[i]);
    return Status::Ok();
  }
  if (dst.dtype == DType::kF32 && src.dtype == DType::kBF16) {
    float* d = dst.as<float>();
    const uint16_t* s = src.as<uint16_t>();
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 16))
    for (size_t i = 0; i < n; ++i) d[i] = BF16ToFloat(s[i]);
    return Status::Ok();
  }
  return RuntimeError(StrFormat("Convert (cpu backend): cannot convert %s to %s",
                                DTypeName(src.dtype), DTypeName(dst.dtype)));
}

// ---- elementwise ops ----
Status CpuBackend::RunAdd(Tensor out, Tensor a, Tensor b) {
  cpu::add(out.as<float>(), a.as<float>(), b.as<float>(), static_cast<size_t>(out.numel()));
  return Status::Ok();
}

Status CpuBackend::RunAddInPlace(Tensor out, Tensor a) {
  cpu::add_inplace(out.as<float>(), a.as<float>(), static_cast<size_t>(out.numel()));
  return Status::Ok();
}

Status CpuBackend::RunScale(Tensor x, float s) {
  const size_t n = static_cast<size_t>(x.numel());
  if (x.dtype == DType::kF32) {
    cpu::scale(x.as<float>(), s, n);
    return Status::Ok();
  }
  if (x.dtype == DType::kBF16) {
    uint16_t* p = x.as<uint16_t>();
    for (size_t i = 0; i < n; ++i) p[i] = FloatToBF16(BF16ToFloat(p[i]) * s);
    return Status::Ok();
  }
  return RuntimeError(
      StrFormat("Scale (cpu backend): x %s is %s", x.shape_string().c_str(), DTypeName(x.dtype)));
}

float* CpuBackend::AttentionScratch(int T, int HS) {
  const size_t need = cpu::attention_scratch_floats(T, HS, omp_get_max_threads());
  if (attention_scratch_.size() < need) attention_scratch_.resize(need);
  return attention_scratch_.data();
}

std::unique_ptr<Backend> MakeCpuBackend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace trainer

namespace trainer {

// The CPU backend runs every op before returning, so the host clock is its stream order.
Status CpuBackend::Mark(int index) {
  if (index < 0 || index >= kMaxMarks) return RuntimeError("CpuBackend::Mark: index out of range");
  marks_[index] = std::chrono::steady_clock::now();
  return Status::Ok();
}

Status CpuBackend::SecondsBetween(int from, int to, double* seconds) {
  if (from < 0 || to < 0 || from >= kMaxMarks || to >= kMaxMarks)
    return RuntimeError("CpuBackend::SecondsBetween: index out of range");
  *seconds = std::chrono::duration<double>(marks_[to] - marks_[from]).count();
  return Status::Ok();
}

}  // namespace trainer
