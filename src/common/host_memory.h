// Host memory that this process could still fill: /proc/meminfo's MemAvailable, or less where a
// cgroup of this process (Slurm's --mem, a container's limit) leaves less. `trainer train` and
// `trainer check` hold the CPU path's arena against it before allocating.
#pragma once

#include <string>

namespace trainer {

struct HostMemoryFacts {
  double total_bytes = -1;      // MemTotal, or the tightest cgroup limit when lower
  double available_bytes = -1;  // -1 when nothing could be read
  std::string source;           // "MemAvailable", or "cgroup /slurm/job_12 memory.max 8.0 GiB"
};

// Over the process's cgroup and its parents (v2: memory.max, memory.current; v1: the memory
// controller's memory.limit_in_bytes, memory.usage_in_bytes), a limit leaves its limit less the
// working set (usage less the inactive file pages, which the kernel reclaims first). `root`
// prefixes /proc and /sys (for tests).
HostMemoryFacts QueryHostMemory(const std::string& root = "");

// Whether `ranks` ranks of a host can each take `bytes` more host memory (an asynchronous save's
// copy of the state), leaving a tenth of what is available for the rest (data, HDF5's caches, the
// writer's buffers). True where nothing could be read.
bool HostCopyFits(double bytes, int ranks, const HostMemoryFacts& host);

}  // namespace trainer
