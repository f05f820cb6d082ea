// `trainer check`'s view of the ranks' device facts (check_gpu.h's RankFacts, gathered to every
// rank): the failures that only show across ranks (a rank on the CPU beside GPU ranks, two ranks
// on one GPU, versions that differ from rank 0's, a small /dev/shm on a host with several GPU
// ranks), and the per-host summary line.
#pragma once

#include <string>
#include <vector>

#include "cli/check_gpu.h"
#include "cli/check_report.h"

namespace trainer {

// NCCL keeps the buffers between GPUs of one host in /dev/shm; NVIDIA's containers ask for 1 GiB.
constexpr double kMinShmBytesForNccl = 1024.0 * 1024 * 1024;

// Every rank derives the same list from the same facts (rank r's at facts[r], on hosts[r]).
// host_staged: host-staged collectives (Distributed.gpu_collectives=mpi), where ranks may share
// a GPU and NCCL's /dev/shm is not needed.
std::vector<CheckFailure> CrossRankFailures(const std::vector<RankFacts>& facts,
                                            const std::vector<std::string>& hosts,
                                            bool host_staged = false);

// "N hosts:" then one line per host: its ranks, GPUs, /dev/shm and versions (its first rank's).
std::string HostsText(const std::vector<RankFacts>& facts, const std::vector<std::string>& hosts);

}  // namespace trainer
