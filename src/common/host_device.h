// TRAINER_HOST_DEVICE: __host__ __device__ under nvcc, nothing elsewhere: for the few functions
// that the host, the CPU backend and the CUDA kernels share (gradient_clip.h,
// master_remainder.h).
#pragma once

#ifdef __CUDACC__
#define TRAINER_HOST_DEVICE __host__ __device__
#else
#define TRAINER_HOST_DEVICE
#endif
