// Rotary position embedding in Hugging Face's rotate-half layout, in place on the q and k heads
// of qkv (B,T,(NH+2*NKV)*HD): the kernel and the CpuBackend hook. Element i < HD/2 of a head
// pairs with element i + HD/2 and the pair turns by the angle of (position t, frequency i), read
// from the table cos_sin (2, P, HD/2). The inverse turns by minus the angle (the transpose), which
// is the backward pass of the gradient. Rows are independent and split over threads. Under
// Data.packing: documents a row's position counts from its document's start (doc_starts).
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {

void rope(float* qkv, const float* cos_sin, int B, int T, int NH, int NKV, int HD, int P,
          bool inverse, const int32_t* doc_starts) {
  const int half = HD / 2, heads = NH + NKV;  // the q and k heads; v is left alone
  const int64_t W = static_cast<int64_t>(NH + 2 * NKV) * HD;
  const int64_t N = static_cast<int64_t>(B) * T;
  // The transposed rotation is the same one with the sine negated.
  const float sign = inverse ? -1.f : 1.f;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = n % T - (doc_starts ? doc_starts[n] : 0);  // the position
    const float* cos_t = cos_sin + t * half;                                   // (HD/2)
    const float* sin_t = cos_sin + static_cast<int64_t>(P) * half + t * half;  // (HD/2)
    float* row = qkv + n * W;                                                  // (NH+2*NKV, HD)
    for (int j = 0; j < heads; ++j) {
      float* x0 = row + static_cast<int64_t>(j) * HD;  // first half of the head
      float* x1 = x0 + half;                           // second half
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float c = cos_t[i], s = sign * sin_t[i];
        const float a = x0[i], b = x1[i];
        x0[i] = a * c - b * s;
        x1[i] = b * c + a * s;
      }
    }
  }
}

}  // namespace cpu

// The shapes were checked by Backend (backend.cpp).
Status CpuBackend::RunRope(Tensor qkv, Tensor cos_sin, int num_heads, int num_kv_heads,
                           bool inverse, Tensor doc_starts) {
  const int HD = static_cast<int>(qkv.dim(2) / (num_heads + 2 * num_kv_heads));
  cpu::rope(qkv.as<float>(), cos_sin.as<float>(), static_cast<int>(qkv.dim(0)),
            static_cast<int>(qkv.dim(1)), num_heads, num_kv_heads, HD,
            static_cast<int>(cos_sin.dim(1)), inverse,
            doc_starts.empty() ? nullptr : doc_starts.as<int32_t>());
  return Status::Ok();
}

}  // namespace trainer
