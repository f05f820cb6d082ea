// The communicator of Distributed.gpu_collectives=mpi: a StagedCommunicator
// (staged_communicator.h) whose staging copies between the rank's GPU and host memory, waiting
// for the whole device before each call and after its copies back. Slow (a device
// synchronisation and two copies per call), but it needs no NCCL and lets ranks share a GPU
// (NCCL refuses two ranks on one device): for debugging a layout, and for trying one on a
// machine with fewer GPUs than ranks.
#pragma once

#include <memory>

#include "common/communicator.h"
#include "mpi_bootstrap/mpi_runtime.h"

namespace trainer {

// Over a duplicate of `group`'s MPI communicator (collective over its members), on the CUDA
// device current at this call. In a build without CUDA, an error naming the key.
Status MakeHostStagedCommunicator(MpiCommunicator* group, std::unique_ptr<Communicator>* out);

}  // namespace trainer
