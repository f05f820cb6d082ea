// MakeHostStagedCommunicator (host_staged_communicator.h): StagedCommunicator with CUDA copies.
#include "mpi_bootstrap/host_staged_communicator.h"

#include <string>

#include "common/agree.h"
#include "common/log.h"
#include "mpi_bootstrap/mpi_check.h"
#include "mpi_bootstrap/staged_communicator.h"

#if TRAINER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace trainer {

#if TRAINER_WITH_CUDA
namespace {

// Synchronous copies on the rank's device. Ready() and Done() wait for the whole device: the
// call's input may come from any stream (the backend's may be non-blocking, and some groups run
// on streams of their own), and the kernels after it may run on any stream too.
class CudaStaging final : public DeviceStaging {
 public:
  CudaStaging(int device, std::string group) : device_(device), group_(std::move(group)) {}

  Status Ready() override {
    // This thread on the group's device (a call may come from another thread than the setup's).
    const cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) return Error("cudaSetDevice", e);
    return Synchronize("waiting for the device");
  }
  Status ToHost(void* host, const void* device, size_t bytes) override {
    return Copy(host, device, bytes, cudaMemcpyDeviceToHost);
  }
  Status ToDevice(void* device, const void* host, size_t bytes) override {
    return Copy(device, host, bytes, cudaMemcpyHostToDevice);
  }
  Status Done() override { return Synchronize("copies to the device"); }

 private:
  Status Error(const char* what, cudaError_t e) const {
    return RuntimeError(StrFormat("host-staged collective on group %s: %s: %s", group_.c_str(),
                                  what, cudaGetErrorString(e)));
  }
  Status Synchronize(const char* what) const {
    const cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? Status::Ok() : Error(what, e);
  }
  Status Copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind) const {
    if (bytes == 0) return Status::Ok();
    const cudaError_t e = cudaMemcpy(to, from, bytes, kind);
    return e == cudaSuccess ? Status::Ok() : Error("cudaMemcpy", e);
  }

  int device_;
  std::string group_;
};

}  // namespace

Status MakeHostStagedCommunicator(MpiCommunicator* group, std::unique_ptr<Communicator>* out) {
  int device = 0;
  const cudaError_t e = cudaGetDevice(&device);
  Status status;
  if (e != cudaSuccess)
    status = RuntimeError(StrFormat("host-staged collectives for group %s: cudaGetDevice: %s",
                                    group->name().c_str(), cudaGetErrorString(e)));
  TRAINER_RETURN_IF_ERROR(AgreeOnStatus(group, status));
  // A communicator of its own, as NCCL's is: its collectives never pair with the host-side ones
  // that the group's members issue on `group` in between.
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(group->comm(), &dup));
  *out = MakeStagedCommunicator(std::make_unique<MpiCommunicator>(dup, group->name(), true),
                                std::make_unique<CudaStaging>(device, group->name()));
  return Status::Ok();
}

#else

Status MakeHostStagedCommunicator(MpiCommunicator* group, std::unique_ptr<Communicator>* out) {
  (void)group;
  (void)out;
  return EnvironmentError("Distributed.gpu_collectives=mpi needs a CUDA build of the trainer");
}

#endif

}  // namespace trainer
