// Shape and dtype checks of the CUDA backend's op tier. Each returns a Status whose message names
// the op, the tensor, what was expected and what came (a mismatch is a bug in the calling layer).
#pragma once

#include <string>

#include "common/log.h"
#include "common/status.h"
#include "common/tensor.h"

namespace trainer {
namespace cuda {

// "rank R on HOST", for the <where> part of messages.
inline std::string Where() {
  const ProcessIdentity& id = GetProcessIdentity();
  return StrFormat("rank %d on %s", id.rank, id.host.c_str());
}

inline Status OpError(const char* op, const std::string& why) {
  return RuntimeError(
      StrFormat("CUDA backend op %s (%s): %s. This is a bug in the calling layer: "
                "report it with this line",
                op, Where().c_str(), why.c_str()));
}

// Rows and columns of a tensor seen as a matrix (all leading dims, last dim).
inline int64_t Rows(const Tensor& t) {
  return t.ndim == 0 ? 0 : t.numel() / t.dim(-1);
}
inline int64_t Cols(const Tensor& t) {
  return t.ndim == 0 ? 0 : t.dim(-1);
}

inline Status CheckTensor(const char* op, const char* name, const Tensor& t, DType dtype,
                          int64_t numel) {
  if (t.empty()) return OpError(op, StrFormat("%s is empty", name));
  if (t.dtype != dtype)
    return OpError(op,
                   StrFormat("%s is %s, expected %s", name, DTypeName(t.dtype), DTypeName(dtype)));
  if (t.numel() != numel)
    return OpError(op, StrFormat("%s %s has %lld elements, expected %lld", name,
                                 t.shape_string().c_str(), (long long)t.numel(), (long long)numel));
  return Status::Ok();
}

// Same as CheckTensor, but an empty tensor (an output to skip) passes.
inline Status CheckOptional(const char* op, const char* name, const Tensor& t, DType dtype,
                            int64_t numel) {
  return t.empty() ? Status::Ok() : CheckTensor(op, name, t, dtype, numel);
}

inline Status CheckFloatType(const char* op, const char* name, const Tensor& t) {
  if (t.dtype == DType::kF32 || t.dtype == DType::kBF16) return Status::Ok();
  return OpError(op, StrFormat("%s is %s, expected f32 or bf16", name, DTypeName(t.dtype)));
}

}  // namespace cuda
}  // namespace trainer
