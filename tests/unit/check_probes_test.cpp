// Tests of the one-rank parts of `trainer check` (src/cli/check_probes.h, check_report.h,
// check_gpu.h): the all-reduce check catches a wrong element in any timed call, the pipeline's
// send/recv check runs its links in phase order, sends the documented patterns and catches a call
// that delivers nothing, probe files are
// seen only with the right nonce, rank and host, the launcher's rank count comes from the right
// variable, failures survive the gather, rank lists are compressed as documented, and the host
// memory left is read from meminfo and cgroups (v2 and v1) as the kernel writes them, and two
// ranks on one GPU are reported unless the collectives are host-staged.
#include "cli/check_probes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "cli/check_gpu.h"
#include "cli/check_hosts.h"
#include "cli/check_report.h"
#include "common/filesystem.h"
#include "common/host_memory.h"
#include "common/launcher.h"
#include "common/log.h"
#include "test_communicator.h"

namespace trainer {
namespace {

// A stand-in for a group of `members` ranks that all contribute what this one does: the sum is
// `members` times the input. Optionally adds 1 to one element in one call (a broken transport).
class ScalingCommunicator final : public TestCommunicator {
 public:
  ScalingCommunicator(int members, int corrupt_call, size_t corrupt_element)
      : TestCommunicator(0, members),
        members_(members),
        corrupt_call_(corrupt_call),
        corrupt_element_(corrupt_element) {}
  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp) override {
    float* x = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) x[i] *= static_cast<float>(members_);
    if (calls_++ == corrupt_call_ && corrupt_element_ < count) x[corrupt_element_] += 1.0f;
    return Status::Ok();
  }
  int calls() const { return calls_; }

 private:
  int members_, corrupt_call_;
  size_t corrupt_element_;
  int calls_ = 0;
};

TEST(CheckAllReduce, ExactSumPasses) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  ScalingCommunicator group(3, -1, 0);
  double seconds = -1;
  std::string mismatch = "stale";
  // Each of 3 members contributes 7 * (i % 5 + 1): the exact sum is 21 * (i % 5 + 1).
  ASSERT_TRUE(TimeExactAllReduce(&group, cpu.get(), 7.f, 21.0, 1000, 4, &seconds, &mismatch).ok());
  EXPECT_EQ(mismatch, "");
  EXPECT_EQ(group.calls(), 5);  // one warm-up and four timed calls
  EXPECT_GE(seconds, 0.0);
}

TEST(CheckAllReduce, WrongGroupSumIsCaught) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  ScalingCommunicator group(3, -1, 0);
  double seconds = 0;
  std::string mismatch;
  // A member missing from the sum (20 instead of 21) shows at element 0 already.
  ASSERT_TRUE(TimeExactAllReduce(&group, cpu.get(), 7.f, 20.0, 100, 2, &seconds, &mismatch).ok());
  EXPECT_NE(mismatch.find("element 0 of 100 is 21 where the exact sum is 20"), std::string::npos)
      << mismatch;
}

TEST(CheckAllReduce, OneWrongElementInTheLastCallIsCaught) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  ScalingCommunicator group(2, /*corrupt_call=*/3, /*corrupt_element=*/777);
  double seconds = 0;
  std::string mismatch;
  ASSERT_TRUE(TimeExactAllReduce(&group, cpu.get(), 1.f, 2.0, 1000, 3, &seconds, &mismatch).ok());
  // Element 777: 2 * (777 % 5 + 1) = 6, corrupted to 7.
  EXPECT_NE(mismatch.find("element 777 of 1000 is 7 where the exact sum is 6"), std::string::npos)
      << mismatch;
  EXPECT_EQ(group.calls(), 4);  // the check did not stop the calls early
}

// Stage 1 of a pipeline of 3 seen from inside: SendRecv records the peer and what this member
// sent, and delivers what stage `peer` sends toward it, (i + 4099 * peer + 8191 * direction)
// mod 2^22 written out here, for the first `deliveries` calls (later ones deliver nothing).
class NeighbourCommunicator final : public TestCommunicator {
 public:
  explicit NeighbourCommunicator(int deliveries)
      : TestCommunicator(1, 3), deliveries_(deliveries) {}
  Status SendRecv(const void* send, size_t send_count, int send_peer, void* recv, size_t recv_count,
                  int recv_peer, DType dtype) override {
    EXPECT_EQ(send_peer, recv_peer);
    EXPECT_EQ(send_count, recv_count);
    EXPECT_EQ(dtype, DType::kF32);
    peers.push_back(send_peer);
    const float* out = static_cast<const float*>(send);
    sent[send_peer].assign(out, out + send_count);
    float* in = static_cast<float*>(recv);
    const size_t offset = send_peer == 0 ? 0 : 2 * 4099 + 8191;  // stage 0 toward 1, 2 toward 1
    if (static_cast<int>(peers.size()) <= deliveries_)
      for (size_t i = 0; i < recv_count; ++i) in[i] = static_cast<float>((i + offset) % 4194304);
    return Status::Ok();
  }
  std::vector<int> peers;
  std::map<int, std::vector<float>> sent;

 private:
  int deliveries_;
};

const std::vector<std::string> kStages = {"stage 0 (rank 0 on a)", "stage 1 (rank 1 on b)",
                                          "stage 2 (rank 2 on c)"};

TEST(CheckSendRecv, BothNeighboursExactInPhaseOrder) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  NeighbourCommunicator group(1000);
  double gbps[2] = {-1, -1};
  std::string mismatch = "stale";
  ASSERT_TRUE(TimeExactSendRecv(&group, cpu.get(), 5000, 2, false, kStages, gbps, &mismatch).ok());
  EXPECT_EQ(mismatch, "");
  // Link (0, 1) of even stage 0 first, then (1, 2), in each of the 3 rounds.
  EXPECT_EQ(group.peers, std::vector<int>({0, 2, 0, 2, 0, 2}));
  ASSERT_EQ(group.sent[2].size(), 5000u);
  ASSERT_EQ(group.sent[0].size(), 5000u);
  for (size_t i : {size_t{0}, size_t{2500}, size_t{4999}}) {
    EXPECT_EQ(group.sent[2][i], static_cast<float>(i + 4099));         // activations
    EXPECT_EQ(group.sent[0][i], static_cast<float>(i + 4099 + 8191));  // gradients
  }
  EXPECT_GT(gbps[0], 0);
  EXPECT_GE(gbps[1], gbps[0]);
}

TEST(CheckSendRecv, ACallThatDeliversNothingIsCaught) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  NeighbourCommunicator group(2);  // the warm-up round only: a stale buffer would pass
  double gbps[2];
  std::string mismatch;
  ASSERT_TRUE(TimeExactSendRecv(&group, cpu.get(), 100, 2, false, kStages, gbps, &mismatch).ok());
  EXPECT_EQ(mismatch, "element 0 of 100 from stage 0 (rank 0 on a) is -1 where 0 was sent");
  EXPECT_EQ(group.peers.size(), 6u);  // the check did not stop the calls early
}

TEST(CheckSendRecv, TheFaultHookCorruptsOneElementTowardTheNextStage) {
  std::unique_ptr<Backend> cpu = MakeCpuBackend();
  NeighbourCommunicator group(1000);
  double gbps[2];
  std::string mismatch;
  ASSERT_TRUE(TimeExactSendRecv(&group, cpu.get(), 100, 1, true, kStages, gbps, &mismatch).ok());
  EXPECT_EQ(group.sent[2][50], 50.5f + 4099);
  EXPECT_EQ(group.sent[2][49], 49.0f + 4099);
  EXPECT_EQ(group.sent[0][50], 50.0f + 4099 + 8191);
  setenv("TRAINER_FAULT_CHECK_P2P", "3", 1);
  EXPECT_TRUE(InjectedSendRecvFault(3));
  EXPECT_FALSE(InjectedSendRecvFault(0));
  unsetenv("TRAINER_FAULT_CHECK_P2P");
  EXPECT_FALSE(InjectedSendRecvFault(0));
}

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = ::testing::TempDir() + "check_probes_" + std::to_string(getpid()) + "/a/b";
  }
  void TearDown() override { (void)RemoveTree(ParentDirectory(ParentDirectory(folder_))); }
  std::string folder_;
};

TEST_F(ProbeTest, SeenOnlyWithTheRightNonceRankAndHost) {
  ASSERT_TRUE(WriteProbe(folder_, 0x1234, 3, "node7").ok());  // creates the folders
  const double now = SteadySeconds();
  EXPECT_TRUE(SeesProbe(folder_, 0x1234, 3, "node7", now));
  EXPECT_FALSE(SeesProbe(folder_, 0x1235, 3, "node7", now));  // an older run's probe
  EXPECT_FALSE(SeesProbe(folder_, 0x1234, 2, "node7", now));  // another rank's
  EXPECT_FALSE(SeesProbe(folder_, 0x1234, 3, "node8", now));  // same name written elsewhere
  ASSERT_EQ(std::remove(ProbePath(folder_, 0x1234, 3).c_str()), 0);
  EXPECT_FALSE(SeesProbe(folder_, 0x1234, 3, "node7", now));
}

TEST_F(ProbeTest, MissingFoldersAreWhatTheProbeCreates) {
  const std::string top = ParentDirectory(ParentDirectory(folder_));  // ..._<pid>, not there yet
  EXPECT_EQ(MissingFolders(folder_),
            (std::vector<std::string>{folder_, ParentDirectory(folder_), top}));
  ASSERT_TRUE(WriteProbe(folder_, 1, 0, "h").ok());
  EXPECT_TRUE(MissingFolders(folder_).empty());
  EXPECT_EQ(MissingFolders(folder_ + "/c"), std::vector<std::string>{folder_ + "/c"});
  EXPECT_EQ(MissingFolders("relative_" + std::to_string(getpid())),
            std::vector<std::string>{"relative_" + std::to_string(getpid())});
}

TEST_F(ProbeTest, WaitsUntilTheDeadline) {
  const double start = SteadySeconds();
  EXPECT_FALSE(SeesProbe(folder_, 1, 0, "h", start + 0.3));
  EXPECT_GE(SteadySeconds() - start, 0.3);
}

TEST(LauncherWorldSize, MpirunBeforeSrun) {
  std::string variable;
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("SLURM_STEP_NUM_TASKS", "2", 1);
  setenv("SLURM_PROCID", "0", 1);
  EXPECT_EQ(LauncherWorldSize(&variable), 4);  // mpirun's daemons may be an srun step of 2
  EXPECT_EQ(variable, "OMPI_COMM_WORLD_SIZE=4");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("PMI_SIZE");
  EXPECT_EQ(LauncherWorldSize(&variable), 2);
  EXPECT_EQ(variable, "SLURM_STEP_NUM_TASKS=2");
  unsetenv("SLURM_PROCID");  // not started by srun: a batch script's variables say nothing
  EXPECT_EQ(LauncherWorldSize(&variable), 0);
  EXPECT_EQ(variable, "");
  unsetenv("SLURM_STEP_NUM_TASKS");
}

// An asynchronous save's host copy against a host's available memory: 4 ranks of 10 GiB each
// need 40 GiB within 90% of what is available.
TEST(HostCopy, FitsWithinNineTenthsOfTheAvailableMemory) {
  const double gib = 1073741824.0;
  HostMemoryFacts host;
  host.total_bytes = 128 * gib;
  host.available_bytes = 44.5 * gib;  // 90%: 40.05 GiB
  EXPECT_TRUE(HostCopyFits(10 * gib, 4, host));
  host.available_bytes = 44 * gib;  // 90%: 39.6 GiB
  EXPECT_FALSE(HostCopyFits(10 * gib, 4, host));
  EXPECT_TRUE(HostCopyFits(10 * gib, 1, host));
  host.available_bytes = -1;  // nothing read: no reason to refuse
  EXPECT_TRUE(HostCopyFits(1e15, 8, host));
}

TEST(CheckReport, FailuresSurviveTheGather) {
  SelfCommunicator self("world");
  std::vector<CheckFailure> mine = {{0, "data file", "not found (x.h5): no such file. Fix"},
                                    {3, "checkpoint folder", "a: b; c (d)"}};
  std::vector<CheckFailure> all;
  ASSERT_TRUE(GatherFailures(&self, mine, &all).ok());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].rank, 3);
  EXPECT_EQ(all[1].check, "checkpoint folder");
  EXPECT_EQ(all[1].message, "a: b; c (d)");
  ASSERT_TRUE(GatherFailures(&self, {}, &all).ok());
  EXPECT_TRUE(all.empty());
}

TEST(CheckReport, RankLists) {
  EXPECT_EQ(FormatRanks({0, 1, 2, 3, 8, 10, 11}), "0-3, 8, 10-11");
  EXPECT_EQ(FormatRanks({5}), "5");
  EXPECT_EQ(FormatRanks({}), "");
  EXPECT_EQ(FormatRanks({0, 2, 4, 6, 7}, 2), "0, 2 and 3 more");
  EXPECT_EQ(Plural(1, "host"), "1 host");
  EXPECT_EQ(Plural(0, "GPU"), "0 GPUs");
}

TEST(CheckFacts, ShmAndBytes) {
  EXPECT_LT(QueryShm("/nonexistent/shm").total_bytes, 0);
  const ShmFacts root = QueryShm("/");
  EXPECT_GT(root.total_bytes, 0);
  EXPECT_LE(root.free_bytes, root.total_bytes);
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536.0 * 1024 * 1024), "1.5 GiB");
}

TEST(CheckFacts, GpuAnswersMatchTheBuild) {
  StatusOr<GpuFacts> none = QueryGpu(-1);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->uuid.empty());
#if TRAINER_WITH_CUDA
  EXPECT_EQ(GpuLibraryVersions().rfind("CUDA driver ", 0), 0u) << GpuLibraryVersions();
#else
  EXPECT_EQ(none->visible, 0);
  EXPECT_EQ(GpuLibraryVersions(), "CUDA: not built");
  EXPECT_FALSE(QueryGpu(0).ok());  // a bound device in a build without CUDA is an error
#endif
}

// A fake /proc and /sys under a temporary root: meminfo, the process's cgroup line(s), and the
// cgroup files of each level.
class HostMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "host_memory_" + std::to_string(getpid());
    ASSERT_TRUE(RemoveTree(root_).ok());
    Write("/proc/meminfo", "MemTotal:       16777216 kB\nMemAvailable:    8388608 kB\n");
  }
  void TearDown() override { (void)RemoveTree(root_); }
  // What QueryHostMemory reads under the fake root, against the expected total and room (GiB).
  void ExpectFacts(double total_gib, double available_gib, const std::string& source) {
    const HostMemoryFacts facts = QueryHostMemory(root_);
    EXPECT_EQ(facts.total_bytes, total_gib * 1024 * 1024 * 1024);
    EXPECT_EQ(facts.available_bytes, available_gib * 1024 * 1024 * 1024);
    EXPECT_EQ(facts.source, source);
  }
  void Write(const std::string& path, const std::string& text) {
    ASSERT_TRUE(MakeDirectories(ParentDirectory(root_ + path)).ok());
    ASSERT_TRUE(WriteFileAtomically(root_ + path, text).ok());
  }
  std::string root_;
};

TEST_F(HostMemoryTest, MemAvailableWithoutALimit) {
  Write("/proc/self/cgroup", "0::/user.slice\n");
  Write("/sys/fs/cgroup/user.slice/memory.max", "max\n");
  Write("/sys/fs/cgroup/user.slice/memory.current", "1073741824\n");
  ExpectFacts(16, 8, "MemAvailable");
}

TEST_F(HostMemoryTest, ASlurmJobsCgroupV2LimitLeavesLess) {
  // The job's limit (4 GiB) is a parent of the step's cgroup; its working set is its usage (3
  // GiB) less the inactive file pages (1 GiB): 2 GiB left.
  Write("/proc/self/cgroup", "0::/slurm/job_7/step_0\n");
  Write("/sys/fs/cgroup/slurm/job_7/step_0/memory.max", "max\n");
  Write("/sys/fs/cgroup/slurm/job_7/step_0/memory.current", "1000\n");
  Write("/sys/fs/cgroup/slurm/job_7/memory.max", "4294967296\n");
  Write("/sys/fs/cgroup/slurm/job_7/memory.current", "3221225472\n");
  Write("/sys/fs/cgroup/slurm/job_7/memory.stat", "anon 1\ninactive_file 1073741824\n");
  ExpectFacts(4, 2, "cgroup /slurm/job_7: limit 4.0 GiB");
}

TEST_F(HostMemoryTest, ACgroupV1MemoryLimitAndAnEmptyRoot) {
  Write("/proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n");
  Write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  Write("/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "5\n");
  Write("/sys/fs/cgroup/memory/docker/memory.limit_in_bytes", "2147483648\n");
  Write("/sys/fs/cgroup/memory/docker/memory.usage_in_bytes", "1073741824\n");
  ExpectFacts(2, 1, "cgroup /docker: limit 2.0 GiB");
  EXPECT_LT(QueryHostMemory(root_ + "/nowhere").available_bytes, 0);
}

// CrossRankFailures (check_hosts.h): the second rank on a GPU fails the binding check, naming the
// first, and a host of several GPU ranks needs NCCL's /dev/shm; with host-staged collectives
// (Distributed.gpu_collectives=mpi) ranks may share a GPU and NCCL is not used.
TEST(CrossRankFailures, TwoRanksOnOneGpuUnlessCollectivesAreHostStaged) {
  std::vector<RankFacts> facts(3);
  for (size_t r = 0; r < facts.size(); ++r) {
    facts[r].device = 0;
    facts[r].visible_gpus = 1;
    facts[r].shm_total = 64e9;
    CopyText(facts[r].gpu_uuid, sizeof(facts[r].gpu_uuid), r < 2 ? "GPU-aaaa" : "GPU-bbbb");
    CopyText(facts[r].versions, sizeof(facts[r].versions), "driver 580");
  }
  const std::vector<std::string> hosts = {"node1", "node1", "node2"};
  const std::vector<CheckFailure> failures = CrossRankFailures(facts, hosts);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].rank, 1);
  EXPECT_EQ(failures[0].check, "GPU binding");
  EXPECT_NE(failures[0].message.find("the GPU that rank 0 on node1 uses too"), std::string::npos)
      << failures[0].message;
  EXPECT_TRUE(CrossRankFailures(facts, hosts, /*host_staged=*/true).empty());
  for (RankFacts& f : facts) f.shm_total = 64e6;  // Docker's default
  std::vector<std::string> checks;
  for (const CheckFailure& f : CrossRankFailures(facts, hosts)) checks.push_back(f.check);
  EXPECT_EQ(checks, (std::vector<std::string>{"/dev/shm", "GPU binding"}));
  EXPECT_TRUE(CrossRankFailures(facts, hosts, /*host_staged=*/true).empty());
}

}  // namespace
}  // namespace trainer
