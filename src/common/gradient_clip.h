// The factor that clips gradients of global L2 norm `norm` to at most `max_norm`: 1 when
// max_norm <= 0 (no clipping) or the norm is within it. One definition for the host (Trainer),
// the CPU backend and the CUDA AdamW kernels, which take the norm from device memory.
#pragma once

#include "common/host_device.h"

namespace trainer {

TRAINER_HOST_DEVICE inline float GradientClipScale(double norm, double max_norm) {
  return (max_norm > 0 && norm > max_norm) ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.f;
}

}  // namespace trainer
