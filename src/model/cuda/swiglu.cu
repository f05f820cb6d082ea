// SwiGLU (Llama's MLP activation) forward and backward over gate_up (N,2F) = [gate | up]:
// out = silu(gate) * up, silu(x) = x * sigmoid(x); backward dgate = dout * up * silu'(gate) with
// silu'(x) = sigmoid(x) * (1 + x * (1 - sigmoid(x))), dup = dout * silu(gate). All in f32, rounded
// once. A block takes rows in a grid-stride loop and its threads the row's columns, 16 bytes at a
// time where F and the pointers allow (no index division per element).
#include "model/cuda/cuda_common.cuh"
#include "model/cuda/kernels.h"

namespace trainer {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// Blocks for N rows: a few waves, the row loop covers the rest.
unsigned RowBlocks(int64_t N) {
  const int64_t max_blocks = 132 * 16;
  return static_cast<unsigned>(N < max_blocks ? N : max_blocks);
}

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    SwiGluForwardKernel(T* out, const T* __restrict__ gate_up, int64_t N, int F) {
  constexpr int V = kVector ? Vec16<T>::kCount : 1;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* gate = gate_up + row * 2 * F;
    const T* up = gate + F;
    T* o = out + row * F;
    for (int c = threadIdx.x * V; c < F; c += blockDim.x * V) {
      const Vec16<T> g = LoadChunk<T, kVector>(gate + c), u = LoadChunk<T, kVector>(up + c);
      Vec16<T> y;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        y.v[j] = FromFloat<T>(SwiGluOf(ToFloat(g.v[j]), ToFloat(u.v[j])));
      }
      StoreChunk<T, kVector>(o + c, y);
    }
  }
}

// kAct: also out = the forward's output (SwiGluForwardKernel's, to the bit).
template <typename T, bool kVector, bool kAct>
__global__ void __launch_bounds__(kThreads)
    SwiGluBackwardKernel(T* __restrict__ dgate_up, T* __restrict__ out, const T* __restrict__ dout,
                         const T* __restrict__ gate_up, int64_t N, int F) {
  constexpr int V = kVector ? Vec16<T>::kCount : 1;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* gate = gate_up + row * 2 * F;
    const T* up = gate + F;
    const T* d = dout + row * F;
    T* dgate = dgate_up + row * 2 * F;
    T* dup = dgate + F;
    for (int c = threadIdx.x * V; c < F; c += blockDim.x * V) {
      const Vec16<T> g = LoadChunk<T, kVector>(gate + c), u = LoadChunk<T, kVector>(up + c),
                     dy = LoadChunk<T, kVector>(d + c);
      Vec16<T> dg, du, y;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float x = ToFloat(g.v[j]), sig = Sigmoid(x), dyj = ToFloat(dy.v[j]);
        dg.v[j] = FromFloat<T>(dyj * ToFloat(u.v[j]) * (sig * (1.f + x * (1.f - sig))));
        du.v[j] = FromFloat<T>(dyj * (x * sig));
        if (kAct) y.v[j] = FromFloat<T>(SwiGluOf(x, ToFloat(u.v[j])));
      }
      StoreChunk<T, kVector>(dgate + c, dg);
      StoreChunk<T, kVector>(dup + c, du);
      if (kAct) StoreChunk<T, kVector>(out + row * F + c, y);
    }
  }
}

template <typename T>
void ForwardImpl(T* out, const T* gate_up, int64_t N, int F, cudaStream_t stream) {
  auto kernel = Vectorisable<T>(F, {out, gate_up}) ? SwiGluForwardKernel<T, true>
                                                   : SwiGluForwardKernel<T, false>;
  kernel<<<RowBlocks(N), kThreads, 0, stream>>>(out, gate_up, N, F);
}

template <typename T>
void BackwardImpl(T* dgate_up, T* out, const T* dout, const T* gate_up, int64_t N, int F,
                  cudaStream_t stream) {
  const bool vector = Vectorisable<T>(F, {dgate_up, dout, gate_up}) &&
                      (out == nullptr || Vectorisable<T>(F, {out}));
  auto kernel =
      out != nullptr
          ? (vector ? SwiGluBackwardKernel<T, true, true> : SwiGluBackwardKernel<T, false, true>)
          : (vector ? SwiGluBackwardKernel<T, true, false> : SwiGluBackwardKernel<T, false, false>);
  kernel<<<RowBlocks(N), kThreads, 0, stream>>>(dgate_up, out, dout, gate_up, N, F);
}

}  // namespace

cudaError_t LaunchSwiGluForward(DType dtype, void* out, const void* gate_up, int64_t N, int F,
                                cudaStream_t stream) {
  if (N == 0 || F == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E, ForwardImpl<E>(static_cast<E*>(out), static_cast<const E*>(gate_up), N, F, stream));
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluBackward(DType dtype, void* dgate_up, const void* dout, const void* gate_up,
                                 int64_t N, int F, void* out, cudaStream_t stream) {
  if (N == 0 || F == 0) return cudaSuccess;
  TRAINER_DISPATCH_FLOAT_TYPE(
      dtype, E,
      BackwardImpl<E>(static_cast<E*>(dgate_up), static_cast<E*>(out), static_cast<const E*>(dout),
                      static_cast<const E*>(gate_up), N, F, stream));
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
