// Agreement on errors: every rank of a group passes its own Status; all return non-ok when any
// rank failed, so that no rank walks into a collective that the failed rank will never join; and
// rank 0's text (a choice, a config) made every rank's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/communicator.h"

namespace trainer {

// Returns the local error where this rank failed; elsewhere the highest exit code with an empty
// message. *should_print (optional) is true on one rank only: the lowest failing rank whose
// status carries a message, which prints the line. A failure with an empty message is one that
// an inner agreement already stripped (another rank holds the text) or one already printed, so
// it never takes the printing away from a rank that has the text; where no failing rank has a
// message, no rank prints.
inline Status AgreeOnStatus(Communicator* group, const Status& local,
                            bool* should_print = nullptr) {
  const int size = group->size(), rank = group->rank();
  // One max-reduction of three values: -(failing rank with a message, or size), -(failing rank,
  // or size), and the exit code.
  int values[3] = {-(!local.ok() && !local.message().empty() ? rank : size),
                   -(local.ok() ? size : rank), local.exit_code()};
  Status reduced = group->AllReduce(values, 3, DType::kI32, ReduceOp::kMax);
  if (!reduced.ok()) return reduced;
  const int printer = -values[0], lowest_failing = -values[1];
  if (should_print != nullptr) *should_print = printer == rank;
  if (lowest_failing == size) return Status::Ok();
  if (!local.ok()) return local;
  return Status(static_cast<ExitCode>(values[2]), "");
}

// Rank `root`'s *text on every member of `group` (its length, then its bytes).
inline Status BroadcastText(Communicator* group, std::string* text, int root = 0) {
  int32_t length = static_cast<int32_t>(text->size());
  Status sent = group->Broadcast(&length, 1, DType::kI32, root);
  if (!sent.ok()) return sent;
  std::vector<int32_t> chars(text->begin(), text->end());
  chars.resize(static_cast<size_t>(length));
  sent = group->Broadcast(chars.data(), chars.size(), DType::kI32, root);
  if (!sent.ok()) return sent;
  text->assign(chars.begin(), chars.end());
  return Status::Ok();
}

}  // namespace trainer
