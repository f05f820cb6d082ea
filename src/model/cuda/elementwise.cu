// Elementwise kernels: GELU forward/backward (tanh approximation), add, scale and dtype
// conversion, as grid-stride loops.
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kThreads = 256;

#define TRAINER_GRID_STRIDE_LOOP(i, n)                                      \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

template <typename T>
__global__ void GeluForwardKernel(T* out, const T* in, int64_t n) {
  TRAINER_GRID_STRIDE_LOOP(i, n) out[i] = FromFloat<T>(Gelu(ToFloat(in[i])));
}

// out[i] = op(a[i], b[i]); with kVector, 16 bytes per load (n counts Vec16s then).
template <typename T, bool kVector, typename Op>
__global__ void BinaryKernel(T* out, const T* a, const T* b, int64_t n, Op op) {
  if (kVector) {
    TRAINER_GRID_STRIDE_LOOP(i, n) {
      Vec16<T> x = Load16(a + i * Vec16<T>::kCount), y = Load16(b + i * Vec16<T>::kCount);
#pragma unroll
      for (int k = 0; k < Vec16<T>::kCount; ++k)
        x.v[k] = FromFloat<T>(op(ToFloat(x.v[k]), ToFloat(y.v[k])));
      Store16(out + i * Vec16<T>::kCount, x);
    }
  } else {
    TRAINER_GRID_STRIDE_LOOP(i, n) out[i] = FromFloat<T>(op(ToFloat(a[i]), ToFloat(b[i])));
  }
}

struct GeluBackwardOp {
  __device__ float operator()(float dy, float pre_act) const {
    return dy * GeluDerivative(pre_act);
  }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <typename T, typename Op>
void LaunchBinary(T* out, const T* a, const T* b, int64_t n, Op op, cudaStream_t stream) {
  if (Vectorisable<T>(n, {out, a, b})) {
    const int64_t vectors = n / Vec16<T>::kCount;
    BinaryKernel<T, true>
        <<<GridStrideBlocks(vectors, kThreads), kThreads, 0, stream>>>(out, a, b, vectors, op);
  } else {
    BinaryKernel<T, false>
        <<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(out, a, b, n, op);
  }
}

template <typename T>
__global__ void ScaleKernel(T* x, float s, int64_t n) {
  TRAINER_GRID_STRIDE_LOOP(i, n) x[i] = FromFloat<T>(ToFloat(x[i]) * s);
}

template <typename Dst, typename Src>
__global__ void ConvertKernel(Dst* dst, const Src* src, int64_t n) {
  TRAINER_GRID_STRIDE_LOOP(i, n) dst[i] = FromFloat<Dst>(ToFloat(src[i]));
}

}  // namespace

cudaError_t LaunchGeluForward(DType dtype, void* out, const void* in, int64_t n,
                              cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              GeluForwardKernel<E>
                              <<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(
                                  static_cast<E*>(out), static_cast<const E*>(in), n));
  return cudaGetLastError();
}

cudaError_t LaunchGeluBackward(DType dtype, void* dx, const void* dy, const void* pre_act,
                               int64_t n, cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      LaunchBinary(static_cast<E*>(dx), static_cast<const E*>(dy), static_cast<const E*>(pre_act),
                   n, GeluBackwardOp(), stream));
  return cudaGetLastError();
}

cudaError_t LaunchAdd(DType dtype, void* out, const void* a, const void* b, int64_t n,
                      cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(dtype, E,
                              LaunchBinary(static_cast<E*>(out), static_cast<const E*>(a),
                                           static_cast<const E*>(b), n, AddOp(), stream));
  return cudaGetLastError();
}

cudaError_t LaunchScale(DType dtype, void* x, float s, int64_t n, cudaStream_t stream) {
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      ScaleKernel<E>
      <<<GridStrideBlocks(n, kThreads), kThreads, 0, stream>>>(static_cast<E*>(x), s, n));
  return cudaGetLastError();
}

cudaError_t LaunchConvert(DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n,
                          cudaStream_t stream) {
  if (dst_dtype == src_dtype)
    return cudaMemcpyAsync(dst, src, n * DTypeSize(dst_dtype), cudaMemcpyDeviceToDevice, stream);
  const unsigned blocks = GridStrideBlocks(n, kThreads);
  if (dst_dtype == DType::kBF16 && src_dtype == DType::kF32) {
    ConvertKernel<bf16, float><<<blocks, kThreads, 0, stream>>>(static_cast<bf16*>(dst),
                                                                static_cast<const float*>(src), n);
  } else if (dst_dtype == DType::kF32 && src_dtype == DType::kBF16) {
    ConvertKernel<float, bf16><<<blocks, kThreads, 0, stream>>>(static_cast<float*>(dst),
                                                                static_cast<const bf16*>(src), n);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
