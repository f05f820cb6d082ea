// GPU facts for `trainer check`: how many GPUs a rank sees, the identity of the one it is bound to
// (UUID and PCI bus id, so that two ranks on one GPU can be found), and the CUDA driver/runtime,
// NCCL and cuDNN versions. Only this file's .cpp touches CUDA; in a build without CUDA every
// answer says so ("CUDA: not built").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/status.h"

namespace trainer {

struct GpuFacts {
  int visible = 0;         // CUDA devices this process sees
  std::string uuid;        // "GPU-1a2b3c4d-..." as nvidia-smi -L prints it; empty when none bound
  std::string pci_bus_id;  // "0000:3b:00.0"
  std::string name;        // "NVIDIA H200"
  size_t memory_bytes = 0;
};

// Facts about CUDA device `device` (the rank's bound device), or only `visible` when device < 0.
StatusOr<GpuFacts> QueryGpu(int device);

// "CUDA driver 12.8, runtime 12.8, NCCL 2.26.2, cuDNN 9.8.0", or "CUDA: not built".
std::string GpuLibraryVersions();

// What a rank learns about itself before the process groups exist, gathered to every rank.
struct RankFacts {
  int32_t device = -1;        // bound CUDA device; -1 on the CPU path
  int32_t device_failed = 0;  // binding the device or reading it failed on this rank
  int32_t visible_gpus = 0;
  int32_t padding = 0;  // explicit: the struct travels as bytes
  double shm_total = -1, shm_free = -1;
  char gpu_uuid[48] = {};
  char gpu_pci[32] = {};
  char gpu_name[64] = {};
  char versions[128] = {};
  char cuda_visible_devices[64] = {};
};
static_assert(sizeof(RankFacts) % 4 == 0, "RankFacts travels as 32-bit words");

// src into the fixed-size text field dst (cut to fit, always terminated).
inline void CopyText(char* dst, size_t size, const std::string& src) {
  std::snprintf(dst, size, "%s", src.c_str());
}

}  // namespace trainer
