// Errors of the CUDA backend's ops beyond their contracts (those are checked once for every
// backend, in backend.cpp and op_contracts.cpp): a device limit, a route that refused, named with
// the op and where it ran. Also the rows and columns of a tensor seen as a matrix.
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

}  // namespace cuda
}  // namespace trainer
