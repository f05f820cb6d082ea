// Placeholders for the Llama-family ops until their kernels land (replaced file by file).
#include "model/cpu/cpu_backend.h"

namespace trainer {
namespace {
Status Pending(const char* op) {
  return RuntimeError(std::string(op) + " is not implemented on the cpu backend yet");
}
}  // namespace

Status CpuBackend::RunRmsNormForward(Tensor, Tensor, Tensor, Tensor, float) {
  return Pending("RmsNormForward");
}
Status CpuBackend::RunRmsNormBackward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
  return Pending("RmsNormBackward");
}
Status CpuBackend::RunQkNormForward(Tensor, Tensor, Tensor, Tensor, Tensor, int, int, float) {
  return Pending("QkNormForward");
}
Status CpuBackend::RunQkNormBackward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                     int, int) {
  return Pending("QkNormBackward");
}
Status CpuBackend::RunRope(Tensor, Tensor, int, int, bool) {
  return Pending("Rope");
}
Status CpuBackend::RunSwiGluForward(Tensor, Tensor) {
  return Pending("SwiGluForward");
}
Status CpuBackend::RunSwiGluBackward(Tensor, Tensor, Tensor) {
  return Pending("SwiGluBackward");
}

}  // namespace trainer
