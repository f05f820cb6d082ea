// Shape and dtype checks shared by the CpuBackend ops. Tensors are viewed as matrices: rows =
// all leading dimensions, cols = the last one, so (B,T,C) and (B*T,C) are interchangeable. Errors
// read "<Op> (cpu backend, rank R): <what disagrees>. <fix>".
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/tensor.h"

namespace trainer {
namespace cpu {

inline int64_t Cols(const Tensor& t) {
  return t.ndim == 0 ? 0 : t.dim(-1);
}
inline int64_t Rows(const Tensor& t) {
  return Cols(t) == 0 ? 0 : t.numel() / Cols(t);
}

// A shape error of `op`: "<op> (cpu backend, rank R): <why>. Pass tensors of the shapes that
// src/model/backend.h documents for <op>".
Status OpError(const char* op, const std::string& why);

// t is non-empty and has `dtype`.
Status CheckTensor(const char* op, const char* name, const Tensor& t, DType dtype);
// "<a> (shape) and <b> (shape) disagree on <what>" unless a_value == b_value.
Status CheckAgree(const char* op, const char* a, const Tensor& ta, const char* b, const Tensor& tb,
                  const char* what, int64_t a_value, int64_t b_value);
// "<name> (shape) has <got> <what>, expected <want>" unless got == want.
Status CheckSize(const char* op, const char* name, const Tensor& t, const char* what, int64_t got,
                 int64_t want);
// Same number of elements and the same last dimension.
Status CheckSameShape(const char* op, const char* a, const Tensor& ta, const char* b,
                      const Tensor& tb);

}  // namespace cpu
}  // namespace trainer
