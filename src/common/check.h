// The check macro family. One definition, TRAINER_LIBRARY_CHECK, generates CUDA_CHECK, NCCL_CHECK,
// CUBLAS_CHECK, CUDNN_CHECK (src/model/cuda/cuda_check.h) and MPI_CHECK, HDF5_CHECK. A failed call
// returns a Status upward naming the expression, file, line, rank and host; only main() stops.
#pragma once

#include <string>

#include "common/log.h"
#include "common/status.h"

namespace trainer {

// "<library> call failed ([rank R host] file:line): <expr> returned <error>. <hint>"
inline Status LibraryFailure(const char* library, const char* expression, const std::string& error,
                             const char* file, int line, ExitCode code = ExitCode::kRuntime) {
  const ProcessIdentity& id = GetProcessIdentity();
  return Status(code, StrFormat("%s call failed (rank %d on %s, %s:%d): %s returned %s", library,
                                id.rank, id.host.c_str(), file, line, expression, error.c_str()));
}

}  // namespace trainer

// `is_ok(result)` decides success; `describe(result)` gives the library's own error text.
// `text` is the call as written (#expr in the family's own macro: stringized there, before the
// arguments' macros expand, so that MPI_IN_PLACE reads as such and not as ((void *) 1)).
#define TRAINER_LIBRARY_CHECK(library, expr, text, is_ok, describe)                            \
  do {                                                                                         \
    auto _result_ = (expr);                                                                    \
    if (!(is_ok(_result_)))                                                                    \
      return ::trainer::LibraryFailure(library, text, describe(_result_), __FILE__, __LINE__); \
  } while (0)

// Internal invariant (a bug, not a user error): report like a library failure.
#define TRAINER_ASSERT(cond, what)                                                               \
  do {                                                                                           \
    if (!(cond)) return ::trainer::LibraryFailure("invariant", #cond, what, __FILE__, __LINE__); \
  } while (0)
