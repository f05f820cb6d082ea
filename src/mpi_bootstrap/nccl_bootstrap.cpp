// MakeNcclCommunicator (nccl_bootstrap.h).
#include "mpi_bootstrap/nccl_bootstrap.h"

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
  // Every member learns whether rank 0 got the id and whether every member built its side, so
  // that a failure on one rank stops the whole group here (with that rank's error) instead of
  // leaving the others in the next group's collectives.
  struct {
    int ok = 1;
    ncclUniqueId id;
  } root;
  Status status;
  if (group->rank() == 0) {
    ncclResult_t r = ncclGetUniqueId(&root.id);
    if (r != ncclSuccess) {
      root.ok = 0;
      status = RuntimeError(std::string("ncclGetUniqueId failed on group ") + group->name() +
                            ": " + ncclGetErrorString(r));
    }
  }
  MPI_CHECK(MPI_Bcast(&root, sizeof(root), MPI_BYTE, 0, group->comm()));
  const std::string elsewhere = "NCCL communicator of group " + group->name() + ": ";
  if (!root.ok)
    return status.ok() ? RuntimeError(elsewhere + "the group's rank 0 could not make its id")
                       : status;
  std::unique_ptr<NcclCommunicator> comm;
  status = NcclCommunicator::Create(root.id, group->rank(), group->size(), group->name(),
                                    static_cast<cudaStream_t>(stream), &comm, own_stream);
  int built = status.ok() ? 1 : 0, all_built = 0;
  MPI_CHECK(MPI_Allreduce(&built, &all_built, 1, MPI_INT, MPI_MIN, group->comm()));
  if (!status.ok()) return status;
  if (!all_built) return RuntimeError(elsewhere + "another rank of the group could not build it");
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
