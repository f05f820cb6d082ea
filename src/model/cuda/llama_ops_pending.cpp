// Placeholders for the Llama-family ops until their kernels land (replaced file by file).
#include "model/cuda/cuda_backend.h"

namespace trainer {
namespace {
Status Pending(const char* op) {
  return RuntimeError(std::string(op) + " is not implemented on the cuda backend yet");
}
}  // namespace

Status CudaBackend::RunRmsNormForward(Tensor, Tensor, Tensor, Tensor, float) {
  return Pending("RmsNormForward");
}
Status CudaBackend::RunRmsNormBackward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
  return Pending("RmsNormBackward");
}
Status CudaBackend::RunQkNormForward(Tensor, Tensor, Tensor, Tensor, Tensor, int, int, float) {
  return Pending("QkNormForward");
}
Status CudaBackend::RunQkNormBackward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                      Tensor, int, int) {
  return Pending("QkNormBackward");
}
Status CudaBackend::RunRope(Tensor, Tensor, int, int, bool) {
  return Pending("Rope");
}
Status CudaBackend::RunSwiGluForward(Tensor, Tensor) {
  return Pending("SwiGluForward");
}
Status CudaBackend::RunSwiGluBackward(Tensor, Tensor, Tensor) {
  return Pending("SwiGluBackward");
}

}  // namespace trainer
