// StagedCommunicator: the Communicator interface for buffers that MPI cannot read (device
// memory), over an MPI group: each call copies its input to host memory through a
// `DeviceStaging`, runs the MPI collective there and copies the result back before it returns
// (Distributed.gpu_collectives=mpi; host_staged_communicator.h makes the CUDA one). The
// reductions, gathers and broadcasts go in pieces whose host buffers are each at most
// `chunk_bytes` (a bf16 reduction holds an f32 one and a bf16 one), so no MPI count exceeds
// INT_MAX; point-to-point transfers and the all-to-all (activations, not parameters) go whole, and
// the host buffers grow to the largest of them and are kept. bf16 reductions are summed in f32 and
// rounded once (NCCL rounds after each addition: the same for two ranks, within bf16's rounding
// for more).
#pragma once

#include <cstddef>
#include <memory>

#include "common/communicator.h"
#include "mpi_bootstrap/mpi_runtime.h"

namespace trainer {

// How the bytes of a staged call reach the host and return.
class DeviceStaging {
 public:
  virtual ~DeviceStaging() = default;
  // Before a call: the work that made its input is done (every stream of the device).
  virtual Status Ready() = 0;
  virtual Status ToHost(void* host, const void* device, size_t bytes) = 0;
  virtual Status ToDevice(void* device, const void* host, size_t bytes) = 0;
  // After a call's copies to the device: the work queued next sees them.
  virtual Status Done() = 0;
};

constexpr size_t kStagedChunkBytes = size_t{64} << 20;

// Takes `group` (a communicator of its own: its collectives never pair with ones that other
// code issues on the group's ranks).
std::unique_ptr<Communicator> MakeStagedCommunicator(std::unique_ptr<MpiCommunicator> group,
                                                     std::unique_ptr<DeviceStaging> staging,
                                                     size_t chunk_bytes = kStagedChunkBytes);

}  // namespace trainer
