// MPI_CHECK: the MPI member of the check macro family (common/check.h).
#pragma once

#include <mpi.h>

#include <string>

#include "common/check.h"

namespace trainer {
inline bool MpiOk(int code) {
  return code == MPI_SUCCESS;
}
inline std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}
}  // namespace trainer

#define MPI_CHECK(expr) \
  TRAINER_LIBRARY_CHECK("MPI", expr, #expr, ::trainer::MpiOk, ::trainer::MpiErrorText)
