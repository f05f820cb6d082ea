// HostStagedCommunicator: the Communicator interface for device buffers over an MPI group
// (Distributed.gpu_collectives=mpi). Each call waits for the device, copies its input to host
// memory, runs the MPI collective there and copies the result back before it returns: two copies
// and a device synchronisation per call, so it is slow, but it needs no NCCL and lets ranks
// share a GPU (NCCL refuses two ranks on one device). bf16 reductions are summed in f32 and
// rounded once (NCCL rounds after each addition: the same for two ranks, within bf16's rounding
// for more). For debugging a layout, and for trying one on a machine with fewer GPUs than ranks.
#pragma once

#include <memory>

#include "common/communicator.h"
#include "mpi_bootstrap/mpi_runtime.h"

namespace trainer {

// Over a duplicate of `group`'s MPI communicator (collective over its members), on the CUDA
// device current at this call.
Status MakeHostStagedCommunicator(MpiCommunicator* group, std::unique_ptr<Communicator>* out);

}  // namespace trainer
