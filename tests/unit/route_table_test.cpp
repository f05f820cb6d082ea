// The route policy (route_policy.h) and RouteTable (route_table.h) on made-up times: the
// statistic, the tie rule, refusals, the file's round trip, and the one-line refusals of pins.
#include "model/route_table.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "model/route_policy.h"

namespace trainer {
namespace {

TEST(RoutePolicy, MeanOfTheRunsIsTheCandidatesTime) {
  EXPECT_FLOAT_EQ(RouteTime({0.5f, 0.25f, 0.5f, 1.0f}), 0.5625f);
  EXPECT_FLOAT_EQ(RouteTime({-1.f, 0.75f}), 0.75f);  // a failed run does not count
  EXPECT_FLOAT_EQ(RouteTime({}), -1.f);
}

TEST(RoutePolicy, TurnsTakeTheCandidatesInOrder) {
  ASSERT_EQ(RouteTimedRuns(3), 3 * RoutePolicy::kTimedRuns);
  // Runs 0, 3, 6, ... are candidate 0's: its fastest run is the fastest of all, its mean is not.
  ASSERT_EQ(RoutePolicy::kTimedRuns, 4);
  const std::vector<float> runs = {0.25f, 1.0f, 0.1f,   // turn 1: candidates 0, 1, 2
                                   2.0f,  1.0f, 0.1f,   // turn 2
                                   2.0f,  1.0f, 0.1f,   // turn 3
                                   1.75f, 1.0f, 0.1f};  // turn 4
  const std::vector<float> times = RouteTimes({false, false, true}, runs);
  ASSERT_EQ(times.size(), 3u);
  EXPECT_FLOAT_EQ(times[0], 1.5f);
  EXPECT_FLOAT_EQ(times[1], 1.0f);
  EXPECT_FLOAT_EQ(times[2], -1.f);  // refused: its turns' times are not its own
  EXPECT_EQ(RouteChoice(times), 1);
}

TEST(RoutePolicy, TiesGoToTheCandidateListedFirst) {
  EXPECT_EQ(RouteChoice({0.2f, 0.1f, 0.1f}), 1);
  EXPECT_EQ(RouteChoice({-1.f, 0.3f, 0.3f}), 1);
  EXPECT_EQ(RouteChoice({-1.f, -1.f}), -1);
  EXPECT_EQ(RouteChoice({}), -1);
}

RouteTable SampleTable() {
  RouteTable table;
  table.Record({"gelu_gemm_forward",
                "N=8192 C=768 F=3072 bias",
                {{"cublaslt", 0.25f}, {"cudnn", -1.f}, {"sm90", 0.125f}, {"sm90_pairs", 0.5f}},
                2,
                "timed"});
  table.Record({"gelu_gemm_gradient", "N=8192 F=3072 OC=768 sums", {{"sm90:0", 0.75f}}, 0, "only"});
  return table;
}

TEST(RouteTable, FileRoundTrip) {
  const RouteTable table = SampleTable();
  RouteTable back;
  ASSERT_TRUE(RouteTable::Parse(table.ToJson(), "routes.json", &back).ok());
  ASSERT_EQ(back.entries().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const RouteEntry &a = table.entries()[i], &b = back.entries()[i];
    EXPECT_EQ(a.op, b.op);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.chosen, b.chosen);
    EXPECT_EQ(a.how, b.how);
    ASSERT_EQ(a.candidates.size(), b.candidates.size());
    for (size_t c = 0; c < a.candidates.size(); ++c) {
      EXPECT_EQ(a.candidates[c].name, b.candidates[c].name);
      EXPECT_FLOAT_EQ(a.candidates[c].ms, b.candidates[c].ms);  // binary fractions: exact
    }
  }
  EXPECT_EQ(back.ToJson(), table.ToJson());
  EXPECT_EQ(back.source(), "routes.json");
  // Through a file on disk.
  const std::string path = ::testing::TempDir() + "/route_table_test_routes.json";
  { std::ofstream(path) << table.ToJson(); }
  RouteTable loaded;
  ASSERT_TRUE(RouteTable::Load(path, &loaded).ok());
  EXPECT_EQ(loaded.ToJson(), table.ToJson());
  std::remove(path.c_str());
}

TEST(RouteTable, RecordReplacesTheShapesEntry) {
  RouteTable table = SampleTable();
  table.Record(
      {"gelu_gemm_forward", "N=8192 C=768 F=3072 bias", {{"cublaslt", 0.1f}}, 0, "pinned"});
  ASSERT_EQ(table.entries().size(), 2u);
  EXPECT_EQ(table.Find("gelu_gemm_forward", "N=8192 C=768 F=3072 bias")->chosen_name(), "cublaslt");
  EXPECT_EQ(table.Find("gelu_gemm_forward", "N=1 C=768 F=3072 bias"), nullptr);
}

TEST(RouteTable, TheLogTableStarsTheChoice) {
  const std::string text = SampleTable().Format();
  EXPECT_NE(text.find("gelu_gemm_forward | N=8192 C=768 F=3072 bias | cublaslt 0.250, cudnn -, "
                      "*sm90 0.125, sm90_pairs 0.500 | timed"),
            std::string::npos)
      << text;
}

TEST(RouteTable, LongListsShowTheFirstTheChosenAndTheFastest) {
  RouteTable table;
  RouteEntry e{"cublaslt_gemm", "s", {}, 8, "timed"};
  for (int c = 0; c < 10; ++c) e.candidates.push_back({"c" + std::to_string(c), 0.9f - 0.1f * c});
  e.candidates[9].ms = -1.f;  // refused
  table.Record(e);
  const std::string text = table.Format();
  EXPECT_NE(text.find("cublaslt_gemm | s | c0 0.900, c4 0.500, c5 0.400, c6 0.300, c7 0.200, "
                      "*c8 0.100 (+4 more) | timed"),
            std::string::npos)
      << text;
}

TEST(RouteTable, PinsTheNamedCandidate) {
  const RouteTable table = SampleTable();
  int index = 7;
  ASSERT_TRUE(table
                  .PinnedChoice("gelu_gemm_forward", "N=8192 C=768 F=3072 bias",
                                {"cublaslt", "cudnn", "sm90", "sm90_pairs"},
                                {true, false, true, true}, &index)
                  .ok());
  EXPECT_EQ(index, 2);
  // A shape the file does not name is not pinned (it is timed).
  ASSERT_TRUE(table
                  .PinnedChoice("gelu_gemm_forward", "N=4096 C=768 F=3072 bias", {"cublaslt"},
                                {true}, &index)
                  .ok());
  EXPECT_EQ(index, -1);
}

// Each refusal is one line naming the file, the op, the shape and the candidate.
void ExpectRefusal(const Status& status, const std::string& candidate, const std::string& why) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), ExitCode::kUsage);
  const std::string& m = status.message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find("routes.json"), std::string::npos) << m;
  EXPECT_NE(m.find("gelu_gemm_forward"), std::string::npos) << m;
  EXPECT_NE(m.find("N=8192 C=768 F=3072 bias"), std::string::npos) << m;
  EXPECT_NE(m.find(candidate), std::string::npos) << m;
  EXPECT_NE(m.find(why), std::string::npos) << m;
}

TEST(RouteTable, RefusesAPinThatCannotRun) {
  RouteTable table;
  ASSERT_TRUE(RouteTable::Parse(SampleTable().ToJson(), "routes.json", &table).ok());
  int index = 0;
  // The GPU cannot run sm90 for the shape (e.g. not a Hopper GPU).
  ExpectRefusal(table.PinnedChoice("gelu_gemm_forward", "N=8192 C=768 F=3072 bias",
                                   {"cublaslt", "cudnn", "sm90", "sm90_pairs"},
                                   {true, true, false, false}, &index),
                "sm90", "cannot run this shape");
  // The shape's routes do not include it.
  ExpectRefusal(table.PinnedChoice("gelu_gemm_forward", "N=8192 C=768 F=3072 bias",
                                   {"cublaslt", "cudnn"}, {true, true}, &index),
                "sm90", "not a route of this shape");
}

TEST(RouteTable, RefusesUnknownOpsAndCandidates) {
  RouteTable table;
  ASSERT_TRUE(RouteTable::Parse(SampleTable().ToJson(), "routes.json", &table).ok());
  auto any = [](const std::string&) { return true; };
  auto forward = [](const std::string& c) { return c == "cublaslt" || c == "cudnn"; };
  EXPECT_TRUE(table.CheckNames({{"gelu_gemm_forward", any}, {"gelu_gemm_gradient", any}}).ok());
  ExpectRefusal(table.CheckNames({{"gelu_gemm_forward", forward}, {"gelu_gemm_gradient", any}}),
                "sm90", "not one of the op's routes");
  const Status unknown = table.CheckNames({{"gelu_gemm_forward", any}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("op gelu_gemm_gradient"), std::string::npos)
      << unknown.message();
  EXPECT_EQ(unknown.message().find('\n'), std::string::npos);
}

TEST(RouteTable, RefusesFilesThatAreNotRoutes) {
  RouteTable table;
  auto refused = [&](const std::string& text, const std::string& what) {
    const Status s = RouteTable::Parse(text, "bad.json", &table);
    EXPECT_EQ(s.code(), ExitCode::kUsage) << text;
    EXPECT_NE(s.message().find("bad.json"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  };
  refused("not json", "not a JSON object");
  refused("{\"format\": \"other\", \"version\": 1, \"routes\": []}", "not a routes file");
  refused("{\"format\": \"trainer-gpu-routes\", \"version\": 2, \"routes\": []}", "version");
  refused("{\"format\": \"trainer-gpu-routes\", \"version\": 1}", "no \"routes\" list");
  refused("{\"format\": \"trainer-gpu-routes\", \"version\": 1, \"routes\": [{\"op\": \"a\"}]}",
          "routes[0] has no string \"shape\"");
  refused(
      "{\"format\": \"trainer-gpu-routes\", \"version\": 1, \"routes\": ["
      "{\"op\": \"a\", \"shape\": \"s\", \"chosen\": \"x\"},"
      "{\"op\": \"a\", \"shape\": \"s\", \"chosen\": \"y\"}]}",
      "listed twice");
  const Status missing = RouteTable::Load("/nonexistent/routes.json", &table);
  EXPECT_EQ(missing.code(), ExitCode::kUsage);
  EXPECT_NE(missing.message().find("/nonexistent/routes.json"), std::string::npos);
  // A minimal hand-written pin (no candidates, no times) is accepted.
  ASSERT_TRUE(RouteTable::Parse("{\"format\": \"trainer-gpu-routes\", \"version\": 1, \"routes\": "
                                "[{\"op\": \"a\", \"shape\": \"s\", \"chosen\": \"x\"}]}",
                                "ok.json", &table)
                  .ok());
  EXPECT_EQ(table.Find("a", "s")->chosen_name(), "x");
}

TEST(RouteTable, AShapeNoCandidateRanPinsNothing) {
  RouteTable table = SampleTable();
  table.Record({"cublaslt_gemm", "s", {{"algo1", -1.f}, {"algo2", -1.f}}, -1, "timed"});
  EXPECT_EQ(table.Find("cublaslt_gemm", "s")->chosen_name(), "(none)");
  const std::string json = table.ToJson();
  EXPECT_NE(json.find("\"chosen\":null"), std::string::npos) << json;
  RouteTable back;
  ASSERT_TRUE(RouteTable::Parse(json, "routes.json", &back).ok());
  EXPECT_EQ(back.entries().size(), 2u);
  EXPECT_EQ(back.Find("cublaslt_gemm", "s"), nullptr);
}

}  // namespace
}  // namespace trainer
