// MakeNcclCommunicator (nccl_bootstrap.h).
#include "mpi_bootstrap/nccl_bootstrap.h"

#include <string>

#include "common/agree.h"
#include "common/log.h"
#include "mpi_bootstrap/mpi_check.h"

#if TRAINER_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "mpi_bootstrap/nccl_communicator.h"
#endif

namespace trainer {

Status MakeNcclCommunicator(MpiCommunicator* group, void* stream,
                            std::unique_ptr<Communicator>* out, bool own_stream) {
#if TRAINER_WITH_CUDA
  if (group->size() == 1) {
    // A group of one needs no NCCL: its collectives are copies or nothing, here on the backend's
    // stream (in order with the compute around them, with or without own_stream). An NCCL
    // communicator of one GPU would hold ~0.39 GiB of device memory for nothing (its channels'
    // buffers: four such groups, added to one-GPU runs, raised their memory by 1.55-1.59 GiB).
    const std::string name = group->name();
    const cudaStream_t on = static_cast<cudaStream_t>(stream);
    auto failed = [name](const char* what, cudaError_t e) {
      return RuntimeError(StrFormat("%s on the one-member group %s: %s", what, name.c_str(),
                                    cudaGetErrorString(e)));
    };
    *out = std::make_unique<SelfCommunicator>(
        name,
        [on, failed](void* to, const void* from, size_t bytes) -> Status {
          const cudaError_t e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, on);
          return e == cudaSuccess ? Status::Ok() : failed("device copy", e);
        },
        [on, failed]() -> Status {
          const cudaError_t e = cudaStreamSynchronize(on);
          return e == cudaSuccess ? Status::Ok() : failed("barrier (waiting for the stream)", e);
        });
    return Status::Ok();
  }
  // Every member learns whether rank 0 got the id and whether every member built its side
  // (AgreeOnStatus), so that a failure on one rank stops the whole group here, with that rank's
  // error, instead of leaving the others in the next group's collectives.
  ncclUniqueId id;
  Status status;
  if (group->rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      status = EnvironmentError(StrFormat(
          "ncclGetUniqueId failed on group %s (its first rank, world rank %d on %s): %s. Most "
          "often "
          "NCCL finds no network interface to bootstrap from: set NCCL_SOCKET_IFNAME to the one "
          "the hosts reach each other by (ip addr), and NCCL_DEBUG=INFO for NCCL's reasons",
          group->name().c_str(), GetProcessIdentity().rank, GetProcessIdentity().host.c_str(),
          ncclGetErrorString(r)));
  }
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(group, status));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group->comm()));
  std::unique_ptr<NcclCommunicator> comm;
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(
      group, NcclCommunicator::Create(id, group->rank(), group->size(), group->name(),
                                      static_cast<cudaStream_t>(stream), &comm, own_stream)));
  *out = std::move(comm);
  return Status::Ok();
#else
  (void)group;
  (void)stream;
  (void)out;
  (void)own_stream;
  return EnvironmentError("NCCL communicators need a CUDA build of the trainer");
#endif
}

}  // namespace trainer
