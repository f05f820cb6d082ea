// NCCL communicators for the process groups: the group's rank 0 creates the ncclUniqueId, sends
// it with MPI_Bcast over the group's MPI communicator, and every member calls ncclCommInitRank
// (inside NcclCommunicator::Create). Available when built with CUDA.
#pragma once

#include <memory>

#include "common/communicator.h"
#include "mpi_bootstrap/mpi_runtime.h"

namespace trainer {

// `stream`: the backend's CUDA stream (cudaStream_t), on which collectives are enqueued; with
// own_stream the communicator runs on a new stream of its own instead (to overlap with compute).
// A group of one member gets a SelfCommunicator copying on `stream` instead: no NCCL.
Status MakeNcclCommunicator(MpiCommunicator* group, void* stream,
                            std::unique_ptr<Communicator>* out, bool own_stream = false);

}  // namespace trainer
