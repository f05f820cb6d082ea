// Agreement on errors: every rank of a group passes its own Status; all return non-ok when any
// rank failed, so that no rank walks into a collective that the failed rank will never join.
#pragma once

#include "common/communicator.h"

namespace trainer {

// Returns the local error where this rank failed; elsewhere the highest exit code with an empty
// message. *should_print (optional) is true on the lowest failing rank only, which prints the line.
inline Status AgreeOnStatus(Communicator* group, const Status& local,
                            bool* should_print = nullptr) {
  // One max-reduction: of -(failing rank, or size when ok) and of the exit code.
  int values[2] = {-(local.ok() ? group->size() : group->rank()), local.exit_code()};
  Status reduced = group->AllReduce(values, 2, DType::kI32, ReduceOp::kMax);
  if (!reduced.ok()) return reduced;
  const int lowest_failing = -values[0];
  if (should_print != nullptr) *should_print = lowest_failing == group->rank();
  if (lowest_failing == group->size()) return Status::Ok();
  if (!local.ok()) return local;
  return Status(static_cast<ExitCode>(values[1]), "");
}

}  // namespace trainer
