// Tensor views: a pointer, a dtype and a shape (up to 4 dims), owning nothing. Backends allocate;
// layers and ops pass views. bf16 conversion helpers for the host side.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

namespace trainer {

// kU16: raw 16-bit words (the master weights' remainders, common/master_remainder.h).
enum class DType : uint8_t { kF32, kBF16, kI32, kF64, kU16 };

inline size_t DTypeSize(DType t) {
  return t == DType::kBF16 || t == DType::kU16 ? 2 : t == DType::kF64 ? 8 : 4;
}
inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kF64:
      return "f64";
    case DType::kU16:
      return "u16";
  }
  return "?";
}

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, 4> shape{0, 0, 0, 0};

  Tensor() = default;
  Tensor(void* d, DType t, std::initializer_list<int64_t> dims) : data(d), dtype(t) {
    for (int64_t s : dims) shape[ndim++] = s;
  }
  bool empty() const { return data == nullptr; }
  int64_t numel() const {
    if (ndim == 0) return 0;
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  int64_t dim(int i) const { return i < 0 ? shape[ndim + i] : shape[i]; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // A view of rows [begin, begin + count) along dim 0.
  Tensor rows(int64_t begin, int64_t count) const {
    Tensor t = *this;
    int64_t row = numel() / shape[0];
    t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row) * DTypeSize(dtype);
    t.shape[0] = count;
    return t;
  }
  std::string shape_string() const {
    std::string s = "(";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + ")";
  }
};

// Rows and columns of a tensor seen as a matrix (all leading dims, last dim), as the ops read
// their operands: (B,T,C) and (B*T,C) are the same matrix.
inline int64_t Cols(const Tensor& t) {
  return t.ndim == 0 ? 0 : t.dim(-1);
}
inline int64_t Rows(const Tensor& t) {
  return Cols(t) == 0 ? 0 : t.numel() / Cols(t);
}

// Rows [begin, begin + count) of t seen as that (Rows, Cols) matrix.
inline Tensor MatrixRows(const Tensor& t, int64_t begin, int64_t count) {
  return Tensor(t.data, t.dtype, {Rows(t), Cols(t)}).rows(begin, count);
}

// Host-side bf16 <-> f32 (round to nearest even), matching the device conversion.
inline uint16_t FloatToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float BF16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace trainer
