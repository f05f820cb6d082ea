// The parts of `trainer check` that one rank runs on its own: the world size its launcher meant
// to start, the size of /dev/shm, probe files in the checkpoint folder, and timed collectives
// (all-reduce, all-to-all, the pipeline's send/recv) whose exact results are known in closed
// form. check_command.cpp gathers what they find.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/communicator.h"
#include "common/status.h"
#include "model/backend.h"

namespace trainer {

// Size and free room of a tmpfs such as /dev/shm, in bytes; -1 when the path is missing.
struct ShmFacts {
  double total_bytes = -1;
  double free_bytes = -1;
};
ShmFacts QueryShm(const std::string& path);

// Probe files: rank `rank` writes <folder>/.trainer-check-<nonce>-<rank> holding a line that
// names the nonce, the rank and its host; a folder is shared when every rank sees every probe.
std::string ProbePath(const std::string& folder, uint64_t nonce, int rank);
// Creates the folder if needed and writes this rank's probe (durably, by rename).
Status WriteProbe(const std::string& folder, uint64_t nonce, int rank, const std::string& host);
// True once the probe of `rank` (written on `host`) is there with the expected contents; polls
// until `deadline_seconds` of the steady clock (network file systems may show files late).
bool SeesProbe(const std::string& folder, uint64_t nonce, int rank, const std::string& host,
               double deadline_seconds);
double SteadySeconds();
// The folders of `path` that do not exist, deepest first ("a/b/c" with only "a" there: "a/b/c",
// "a/b"): what WriteProbe would create, for removing them afterwards.
std::vector<std::string> MissingFolders(const std::string& path);

// All-reduces of `count` floats on `group`: one warm-up, then `iterations` timed calls, each
// result compared with the exact sum. Element i is contribution * (i % 5 + 1) on this member, so
// the sum is group_sum * (i % 5 + 1) (exact in f32 while group_sum * 5 < 2^24). Buffers are device
// memory of `backend` when the group wants them (NCCL), else host memory. A wrong result is kept
// as *mismatch ("" when exact) while the remaining calls still run, so that every member makes the
// same calls. *seconds_per_call: mean time of one call (from a barrier to its result).
Status TimeExactAllReduce(Communicator* group, Backend* backend, float contribution,
                          double group_sum, size_t count, int iterations, double* seconds_per_call,
                          std::string* mismatch);

// One all-to-all on `group` with uneven counts: member s sends (s + p) % 3 elements to member p,
// none to some peers as MoE's dispatch does (the pattern's values are s * 4096 + p * 64 + i), then
// every received element is compared with that closed form; counts exchanged first by
// AllToAllCounts. *mismatch as above.
Status ExactAllToAll(Communicator* group, Backend* backend, std::string* mismatch);

// The pipeline's point-to-point transfers on a pp group (member s is stage s): over each link
// (s, s + 1), both ends call SendRecv with `count` floats, the activation direction (to s + 1) and
// the gradient direction (to s - 1) at once, as the 1F1B schedule does. The links of even stages
// run first, then those of odd stages, a group barrier before each, so that no member waits on
// two peers. One warm-up and `iterations` timed rounds; before each call the receive buffer is set
// to -1, after it every element is compared with the sender's pattern, (i + 4099 * sender +
// 8191 * direction) mod 2^22 (exact in f32). Buffers as in TimeExactAllReduce. `stage_names[s]`
// names member s in *mismatch. `corrupt` (a test hook): this member's element count / 2 toward
// s + 1 is off by 0.5. gbps[0] and gbps[1]: the slowest and fastest of this member's links, bytes
// one way per second of one call.
Status TimeExactSendRecv(Communicator* group, Backend* backend, size_t count, int iterations,
                         bool corrupt, const std::vector<std::string>& stage_names, double gbps[2],
                         std::string* mismatch);

// Test hook: TRAINER_FAULT_CHECK_P2P=<rank> makes that world rank corrupt one element it sends in
// TimeExactSendRecv.
bool InjectedSendRecvFault(int rank);

// Test hook: TRAINER_FAULT_CHECK_STALL=<rank> makes that world rank stop, sleeping until it is
// ended, where it calls this (before the all-reduces): a host whose network hangs.
void InjectedStall(int rank);

}  // namespace trainer
