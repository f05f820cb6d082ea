// Helpers for the GPU tests: a fixture holding the CPU reference backend and a CudaBackend,
// device buffers that upload host f32 data in the GPU's dtype and download it back as f32,
// bf16 rounding of host inputs (so both backends see the same values), and a relative L2
// comparison. Every GPU result is compared with the CPU fp32 backend on the same inputs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/tensor.h"
#include "model/backend.h"
#include "model/cuda/cuda_backend.h"

namespace trainer {
namespace cuda_testing {

// A fresh seed per call (printed by the tests' traces so a failure can be replayed).
inline uint32_t FreshSeed() {
  return std::random_device{}();
}

inline std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo = -1.f,
                                       float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> RandomInts(size_t n, std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// Values rounded to what `dtype` can hold (bf16), so that CPU and GPU start from equal inputs.
inline std::vector<float> Rounded(std::vector<float> v, DType dtype) {
  if (dtype == DType::kBF16)
    for (float& x : v) x = BF16ToFloat(FloatToBF16(x));
  return v;
}

// ||got - want|| / ||want|| in double precision (NaN-safe: NaN gives infinity).
inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    if (!std::isfinite(got[i])) return INFINITY;
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

#define EXPECT_RELATIVE_ERROR_BELOW(got, want, tolerance)                                        \
  do {                                                                                           \
    const double _err_ = ::trainer::cuda_testing::RelativeError(got, want);                      \
    EXPECT_LE(_err_, tolerance) << #got << " vs the CPU reference: relative L2 error " << _err_; \
  } while (0)

// How many elements of a second run differ bit for bit from the first (sizes must match), and
// where the first one is: the forward ops are run-to-run deterministic.
inline std::string BitwiseDifferences(const std::vector<float>& again,
                                      const std::vector<float>& first) {
  if (again.size() != first.size()) return "different sizes";
  size_t count = 0, at = 0;
  for (size_t i = 0; i < first.size(); ++i)
    if (std::memcmp(&again[i], &first[i], sizeof(float)) != 0 && count++ == 0) at = i;
  if (count == 0) return "";
  return std::to_string(count) + " of " + std::to_string(first.size()) + " elements, first at " +
         std::to_string(at) + " (" + std::to_string(again[at]) + " against " +
         std::to_string(first[at]) + ")";
}

// EXPECT_BITWISE_EQUAL(again, first) << "context": every float of `again` has the bits of the
// same element of `first`; more context may be streamed into the failure, as with EXPECT_*.
#define EXPECT_BITWISE_EQUAL(again, first)                                                    \
  switch (0)                                                                                  \
  case 0:                                                                                     \
  default:                                                                                    \
    if (const std::string _diff_ = ::trainer::cuda_testing::BitwiseDifferences(again, first); \
        _diff_.empty()) {                                                                     \
    } else                                                                                    \
      ADD_FAILURE() << #again << " differs bitwise from " << #first << ": " << _diff_ << ". "

#define ASSERT_STATUS_OK(expr)                               \
  do {                                                       \
    const ::trainer::Status _s_ = (expr);                    \
    ASSERT_TRUE(_s_.ok()) << #expr << ": " << _s_.message(); \
  } while (0)

// A device buffer of one dtype, owned by the test.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend* backend, DType dtype, std::vector<int64_t> shape)
      : backend_(backend), dtype_(dtype), shape_(std::move(shape)) {
    numel_ = 1;
    for (int64_t s : shape_) numel_ *= s;
    status_ = backend_->Allocate(numel_ * DTypeSize(dtype_), &data_);
  }
  ~DeviceBuffer() { backend_->Free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  const Status& status() const { return status_; }
  Tensor tensor() const {
    Tensor t(data_, dtype_, {});
    t.ndim = static_cast<int>(shape_.size());
    for (int i = 0; i < t.ndim; ++i) t.shape[i] = shape_[i];
    return t;
  }
  // Host f32 values in, converted to the buffer's dtype.
  Status Upload(const std::vector<float>& values) {
    if (dtype_ == DType::kBF16) {
      std::vector<uint16_t> raw(values.size());
      for (size_t i = 0; i < values.size(); ++i) raw[i] = FloatToBF16(values[i]);
      return backend_->CopyToDevice(data_, raw.data(), raw.size() * 2);
    }
    return backend_->CopyToDevice(data_, values.data(), values.size() * 4);
  }
  Status UploadInts(const std::vector<int32_t>& values) {
    return backend_->CopyToDevice(data_, values.data(), values.size() * 4);
  }
  // The buffer as host f32 values.
  std::vector<float> Download() const {
    std::vector<float> out(numel_);
    if (dtype_ == DType::kBF16) {
      std::vector<uint16_t> raw(numel_);
      if (!backend_->CopyToHost(raw.data(), data_, raw.size() * 2).ok()) return {};
      for (size_t i = 0; i < raw.size(); ++i) out[i] = BF16ToFloat(raw[i]);
    } else if (!backend_->CopyToHost(out.data(), data_, out.size() * 4).ok()) {
      return {};
    }
    return out;
  }

 private:
  Backend* backend_;
  DType dtype_;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  void* data_ = nullptr;
  Status status_;
};

// Host tensor view over a std::vector (for the CPU reference backend).
inline Tensor HostView(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kF32, dims);
}
inline Tensor HostView(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kI32, dims);
}

// The CPU reference and a bf16 CudaBackend on device 0, plus a fresh seed per test.
class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu_ = MakeCpuBackend();
    ASSERT_NE(cpu_, nullptr);
    ASSERT_STATUS_OK(CudaBackend::Create(0, DType::kBF16, &gpu_));
    seed_ = FreshSeed();
    rng_.seed(seed_);
  }
  // A device buffer of the GPU's compute dtype holding `values`.
  std::unique_ptr<DeviceBuffer> Compute(const std::vector<float>& values,
                                        std::vector<int64_t> shape) {
    return Buffer(gpu_->compute_dtype(), values, std::move(shape));
  }
  std::unique_ptr<DeviceBuffer> F32(const std::vector<float>& values, std::vector<int64_t> shape) {
    return Buffer(DType::kF32, values, std::move(shape));
  }
  std::unique_ptr<DeviceBuffer> Ints(const std::vector<int32_t>& values,
                                     std::vector<int64_t> shape) {
    auto b = std::make_unique<DeviceBuffer>(gpu_.get(), DType::kI32, std::move(shape));
    EXPECT_TRUE(b->status().ok()) << b->status().message();
    EXPECT_TRUE(b->UploadInts(values).ok());
    return b;
  }
  // Random values rounded to the compute dtype.
  std::vector<float> Random(size_t n, float lo = -1.f, float hi = 1.f) {
    return Rounded(RandomFloats(n, rng_, lo, hi), gpu_->compute_dtype());
  }
  std::string Trace() const { return "seed " + std::to_string(seed_); }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<CudaBackend> gpu_;
  uint32_t seed_ = 0;
  std::mt19937 rng_;

 private:
  std::unique_ptr<DeviceBuffer> Buffer(DType dtype, const std::vector<float>& values,
                                       std::vector<int64_t> shape) {
    auto b = std::make_unique<DeviceBuffer>(gpu_.get(), dtype, std::move(shape));
    EXPECT_TRUE(b->status().ok()) << b->status().message();
    EXPECT_TRUE(b->Upload(values).ok());
    return b;
  }
};

// a - b elementwise (to compare what an accumulating op added, not what was there before).
inline std::vector<float> Minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

}  // namespace cuda_testing
}  // namespace trainer
