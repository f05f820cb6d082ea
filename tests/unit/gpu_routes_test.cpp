// The GPU route report (engine/gpu_routes.h) from rank 1's and rank 0's view of a fake world of
// three ranks whose other tables are set by the test: nothing before every rank is settled (but
// at the last step), one merged table (a shape's route as the lowest rank that ran it chose it)
// adopted by every rank, the file and the JSON that rank 0 writes; a backend without routes (the
// CPU's) reports nothing and uses no collective; Engine.gpu_routes on the CPU is accepted.
#include "engine/gpu_routes.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "model/cpu/cpu_backend.h"
#include "test_communicator.h"

namespace trainer {
namespace {

// A CPU backend standing in for a GPU one: a route table, settled or not, and what it adopted.
class RoutedBackend final : public CpuBackend {
 public:
  const RouteTable* routes() const override { return &table; }
  bool routes_settled() const override { return settled; }
  Status AdoptRoutes(const RouteTable& merged) override {
    adopted = merged;
    ++adoptions;
    return Status::Ok();
  }
  RouteTable table;
  bool settled = true;
  RouteTable adopted;
  int adoptions = 0;
};

// This rank's view of a three-rank world: the others' "unsettled" counts and route files.
class FakeWorld final : public TestCommunicator {
 public:
  FakeWorld(int rank, double others_unsettled, std::vector<std::string> others_texts)
      : TestCommunicator(rank, 3), unsettled_(others_unsettled), texts_(std::move(others_texts)) {}
  Status AllReduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    if (count != 1 || dtype != DType::kF64) return RuntimeError("unexpected all-reduce");
    double* x = static_cast<double*>(data);
    if (op == ReduceOp::kSum) {
      *x += unsettled_;
    } else {  // the longest text
      for (const std::string& t : texts_) *x = std::max(*x, static_cast<double>(t.size()));
    }
    ++reduces;
    return Status::Ok();
  }
  Status AllGather(const void* send, void* recv, size_t count, DType dtype) override {
    if (dtype != DType::kI32) return RuntimeError("unexpected all-gather");
    int32_t* out = static_cast<int32_t*>(recv);
    std::memset(out, 0, count * 3 * 4);
    size_t other = 0;
    for (int r = 0; r < 3; ++r) {
      int32_t* block = out + r * count;
      if (r == rank()) {
        std::memcpy(block, send, count * 4);
        continue;
      }
      const std::string& t = texts_[other++];
      if (1 + (t.size() + 3) / 4 > count) return RuntimeError("all-gather block too small");
      block[0] = static_cast<int32_t>(t.size());
      std::memcpy(block + 1, t.data(), t.size());
    }
    return Status::Ok();
  }
  int reduces = 0;

 private:
  double unsettled_;
  std::vector<std::string> texts_;
};

RouteTable Table(const std::vector<std::tuple<std::string, std::string, std::string>>& routes) {
  RouteTable t;
  for (const auto& [op, shape, chosen] : routes)
    t.Record({op, shape, {{"a", 0.5f}, {"b", 0.25f}}, chosen == "a" ? 0 : 1, "timed"});
  return t;
}

std::string ReadFile(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

struct World {
  RoutedBackend backend;
  std::unique_ptr<FakeWorld> comm;
  ParallelGroups groups;
  std::unique_ptr<GpuRouteReport> report;
  std::string dir = ::testing::TempDir() + "gpu_routes_test";
  World(int rank, double others_unsettled, std::vector<std::string> others) {
    mkdir(dir.c_str(), 0755);
    comm = std::make_unique<FakeWorld>(rank, others_unsettled, std::move(others));
    groups.world_rank = rank;
    groups.world_host = comm.get();
    report = std::make_unique<GpuRouteReport>(&backend, &groups, dir);
  }
};

// Ranks 0, 1, 2: rank 1 disagrees with rank 0 on "gemm x"; rank 2 (another pipeline stage) alone
// has "gemm z".
const RouteTable kRank0 = Table({{"gemm", "x", "a"}, {"attention", "y", "b"}});
const RouteTable kRank1 = Table({{"gemm", "x", "b"}, {"attention", "y", "b"}});
const RouteTable kRank2 = Table({{"gemm", "z", "b"}});

void ExpectMerged(const RouteTable& t) {
  ASSERT_EQ(t.entries().size(), 3u);
  EXPECT_EQ(t.Find("gemm", "x")->chosen_name(), "a");  // rank 0's, not rank 1's
  EXPECT_EQ(t.Find("attention", "y")->chosen_name(), "b");
  EXPECT_EQ(t.Find("gemm", "z")->chosen_name(), "b");
}

TEST(GpuRouteReport, WaitsUntilEveryRankIsSettled) {
  World w(1, /*others_unsettled=*/1, {kRank0.ToJson(), kRank2.ToJson()});
  w.backend.table = kRank1;
  std::string json = "stale";
  ASSERT_TRUE(w.report->AfterStep(false, &json).ok());
  EXPECT_TRUE(json.empty());
  EXPECT_FALSE(w.report->done());
  EXPECT_EQ(w.backend.adoptions, 0);
  // The run's last step reports what there is.
  ASSERT_TRUE(w.report->AfterStep(true, &json).ok());
  EXPECT_TRUE(w.report->done());
  EXPECT_TRUE(json.empty());  // rank 1 writes nothing
  ASSERT_EQ(w.backend.adoptions, 1);
  ExpectMerged(w.backend.adopted);
}

TEST(GpuRouteReport, RankZeroWritesTheMergedTableOnce) {
  World w(0, 0, {kRank1.ToJson(), kRank2.ToJson()});
  w.backend.table = kRank0;
  const std::string path = w.dir + "/gpu_routes.json";
  std::remove(path.c_str());
  std::string json;
  ASSERT_TRUE(w.report->AfterStep(false, &json).ok());
  ASSERT_TRUE(w.report->done());
  ASSERT_EQ(w.backend.adoptions, 1);
  ExpectMerged(w.backend.adopted);
  // The file, the metrics' JSON and the checkpoint's are the same table.
  RouteTable file, metrics;
  ASSERT_TRUE(RouteTable::Parse(ReadFile(path), path, &file).ok());
  ASSERT_TRUE(RouteTable::Parse(json, "json", &metrics).ok());
  ExpectMerged(file);
  EXPECT_EQ(metrics.ToJson(), file.ToJson());
  EXPECT_EQ(w.report->json(), json);
  EXPECT_EQ(json.find('\n'), std::string::npos);  // one line in metrics.jsonl
  // Once: later steps use no collective.
  const int reduces = w.comm->reduces;
  ASSERT_TRUE(w.report->AfterStep(true, &json).ok());
  EXPECT_TRUE(json.empty());
  EXPECT_EQ(w.comm->reduces, reduces);
  EXPECT_EQ(w.backend.adoptions, 1);
}

TEST(GpuRouteReport, ABackendWithoutRoutesReportsNothing) {
  CpuBackend cpu;
  TestCommunicator world(0, 2);  // every collective fails: none may be used
  ParallelGroups groups;
  groups.world_host = &world;
  GpuRouteReport report(&cpu, &groups, ::testing::TempDir());
  std::string json;
  ASSERT_TRUE(report.AfterStep(false, &json).ok());
  EXPECT_TRUE(report.done());
  EXPECT_TRUE(json.empty());
  // Engine.gpu_routes on the CPU: accepted (the file is not even read).
  EXPECT_TRUE(PinGpuRoutes("/nonexistent/routes.json", &cpu).ok());
  EXPECT_TRUE(PinGpuRoutes("auto", &cpu).ok());
}

TEST(GpuRouteReport, ABadRoutesFileIsRefusedOnAGpuBackend) {
  class DeviceLike final : public CpuBackend {
   public:
    bool device_memory() const override { return true; }
  } gpu;
  const Status s = PinGpuRoutes("/nonexistent/routes.json", &gpu);
  EXPECT_EQ(s.code(), ExitCode::kUsage);
  EXPECT_NE(s.message().find("/nonexistent/routes.json"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace trainer
