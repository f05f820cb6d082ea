// The plumbing of `trainer check`'s report: a failed check of one rank, gathering values and
// failures from every rank to every rank (over the world's host communicator, so that all ranks
// agree on the verdict), and the formatting of rank lists and counts.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "common/communicator.h"
#include "common/status.h"
#include "common/strings.h"

namespace trainer {

// One failed check of one rank, printed by rank 0 as "error: <check> (rank R on HOST): <message>".
struct CheckFailure {
  int rank = 0;
  std::string check;    // "GPU binding", "checkpoint folder", ...
  std::string message;  // "<why>. <what to do>"
};

// Every rank's `bytes` bytes at `mine`, in rank order, on every rank (all ranks pass the same
// `bytes`).
Status AllGatherBytes(Communicator* world, const void* mine, size_t bytes, std::vector<char>* all);

// Every rank's `mine` (a trivially copyable value), in rank order, on every rank.
template <typename T>
Status AllGatherValues(Communicator* world, const T& mine, std::vector<T>* all) {
  std::vector<char> bytes;
  TRAINER_RETURN_IF_ERROR(AllGatherBytes(world, &mine, sizeof(T), &bytes));
  all->resize(world->size());
  std::memcpy(static_cast<void*>(all->data()), bytes.data(), bytes.size());
  return Status::Ok();
}

// Every rank's failures (any number, any length), in rank order, on every rank. One small
// all-reduce when no rank failed.
Status GatherFailures(Communicator* world, const std::vector<CheckFailure>& mine,
                      std::vector<CheckFailure>* all);

// The line that ends a failed check, after the failures' own: "trainer check (2 ranks, 2 hosts):
// 1 failure (checkpoint folder) on 1 of 2 ranks (1; node2). Fix the lines above ...". `hosts`:
// each world rank's host.
std::string FailureSummary(const std::vector<CheckFailure>& failures,
                           const std::vector<std::string>& hosts);

// "0-3, 8, 10-11" for sorted ranks; after `limit` pieces, " and N more".
std::string FormatRanks(const std::vector<int>& ranks, size_t limit = 8);

// A collective's transport as the check lines name it: "NCCL, device memory", "MPI, host memory",
// or with `staged` (Distributed.gpu_collectives=mpi) device memory staged through the host.
const char* Transport(bool device, bool staged = false);

// The failure message of a collective on `group` (world ranks `members`) whose result differs
// from the exact one (`mismatch` says where), with the setting to rerun with.
std::string WrongResult(const char* group, const std::vector<int>& members, bool device,
                        const std::string& mismatch, bool staged = false);

}  // namespace trainer
