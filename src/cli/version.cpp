// `trainer --version`: the version, the git commit it was built from, the build's settings, and
// the versions of the libraries compiled in (MPI and HDF5 as linked, asked at run time; CUDA,
// cuDNN and NCCL from the headers of a CUDA build).
#include <hdf5.h>
#include <mpi.h>

#include <iostream>
#include <string>

#include "build_commit.h"
#include "cli/commands.h"
#include "common/log.h"

#if defined(TRAINER_WITH_CUDA) && __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#endif
#if defined(TRAINER_WITH_CUDA) && __has_include(<nccl.h>)
#include <nccl.h>
#endif
#if defined(TRAINER_WITH_CUDA) && __has_include(<cudnn_version.h>)
#include <cudnn_version.h>
#endif

namespace trainer {
namespace {

// The MPI library's own one-line description (e.g. "Open MPI v4.1.4, ..."), before MPI_Init.
std::string MpiLibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string version(text, static_cast<size_t>(length));
  const size_t end = version.find_first_of(",\n");
  return version.substr(0, end);
}

std::string CudaVersions() {
#if defined(TRAINER_WITH_CUDA)
  std::string text = "CUDA backend compiled in";
#if defined(CUDART_VERSION)
  text += StrFormat("; CUDA runtime %d.%d", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
#endif
#if defined(CUDNN_MAJOR) && defined(TRAINER_WITH_CUDNN)
  text += StrFormat("; cuDNN %d.%d.%d (frontend attention)", CUDNN_MAJOR, CUDNN_MINOR,
                    CUDNN_PATCHLEVEL);
#elif !defined(TRAINER_WITH_CUDNN)
  text += "; no cuDNN";
#endif
#if defined(NCCL_MAJOR)
  text += StrFormat("; NCCL %d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#endif
#if defined(TRAINER_WITH_SM90_KERNELS)
  text += "; sm_90a kernels";
#endif
  return text + StrFormat(" (CUDA architectures %s)", TRAINER_CUDA_ARCHITECTURES);
#else
  return "no CUDA backend (built with TRAINER_CUDA=OFF or without nvcc): CPU only";
#endif
}

}  // namespace

int RunVersionCommand() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  int mpi_version = 0, mpi_subversion = 0;
  MPI_Get_version(&mpi_version, &mpi_subversion);
  const std::string sanitize = TRAINER_SANITIZE_FLAGS;
  std::cout << "trainer " << TRAINER_VERSION << "\n"
            << "commit     " << TRAINER_GIT_COMMIT << "\n"
            << "build      " << TRAINER_BUILD_TYPE << ", " << TRAINER_CXX_COMPILER
            << ", flags:" << TRAINER_CXX_FLAGS
            << (sanitize.empty() ? "" : ", sanitizers " + sanitize) << "\n"
            << "cuda       " << CudaVersions() << "\n"
            << "mpi        " << MpiLibraryVersion() << " (MPI " << mpi_version << "."
            << mpi_subversion << ")\n"
            << "hdf5       " << major << "." << minor << "." << release << " (built against "
            << H5_VERS_MAJOR << "." << H5_VERS_MINOR << "." << H5_VERS_RELEASE << ")\n";
  return 0;
}

}  // namespace trainer
