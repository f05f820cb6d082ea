// An f32 master weight kept as two 16-bit halves (Optimizer.store_param_remainders): the bf16
// weight the model computes with, which is the master rounded to nearest with ties away from
// zero, and the master's low 16 bits (the remainder). Together they give the master back exactly:
// the rounding went up exactly when the remainder's top bit is set, so the master's high half is
// the bf16's bits, less one in that case. One definition for the host, the CPU backend and the
// CUDA AdamW kernels.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"

namespace trainer {

// The high half of w: w rounded to bf16, ties away from zero (adding half a bf16 ulp to the
// magnitude bits), a NaN kept a NaN (quieted, as FloatToBF16 does).
TRAINER_HOST_DEVICE inline uint16_t MasterHigh(float w) {
  uint32_t u;
  memcpy(&u, &w, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x8000u) >> 16);
}

TRAINER_HOST_DEVICE inline uint16_t MasterRemainder(float w) {
  uint32_t u;
  memcpy(&u, &w, 4);
  return static_cast<uint16_t>(u & 0xffffu);
}

// The master that MasterHigh and MasterRemainder split.
TRAINER_HOST_DEVICE inline float JoinMaster(uint16_t high, uint16_t remainder) {
  const uint32_t u = ((static_cast<uint32_t>(high) - (remainder >> 15)) << 16) | remainder;
  float w;
  memcpy(&w, &u, 4);
  return w;
}

}  // namespace trainer
