// `trainer check [--config FILE] [-o ...]`: run under the same launcher as training; checks the
// MPI world and rank map, device binding, the configured layout's groups (an all-reduce on each,
// checked for the exact result, with its bandwidth), and ends with one verdict line.
#include <chrono>
#include <iostream>
#include <set>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/run_context.h"
#include "common/log.h"
#include "config/config_loader.h"

namespace trainer {
namespace {

// All-reduce of rank-dependent integers-as-floats: the exact sum is known in closed form.
Status CheckAllReduce(Communicator* group, const char* name, size_t count, double* gbps) {
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((group->rank() + 1) * (i % 7));
  const auto start = std::chrono::steady_clock::now();
  TRAINER_RETURN_IF_ERROR(group->AllReduce(data.data(), count, DType::kF32, ReduceOp::kSum));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int n = group->size();
  const double rank_sum = n * (n + 1) / 2.0;
  for (size_t i = 0; i < count; ++i)
    if (data[i] != static_cast<float>(rank_sum * (i % 7)))
      return EnvironmentError(StrFormat(
          "all-reduce on the %s group gave a wrong result at element %zu (%g, expected %g). "
          "Check the MPI/NCCL transport settings (docs/launching.md)",
          name, i, data[i], rank_sum * (i % 7)));
  // Bus bandwidth as NCCL's tests define it: 2 (n-1)/n * bytes / time.
  *gbps = n > 1 ? 2.0 * (n - 1) / n * count * sizeof(float) / seconds / 1e9 : 0.0;
  return Status::Ok();
}

}  // namespace

int RunCheckCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer check options");
  std::string config_path;
  std::vector<std::string> overrides;
  options.add_options()("config,c", po::value(&config_path)->default_value(""),
                        "YAML config whose layout, data and checkpoint folder are checked")(
      "override,o", po::value(&overrides)->composing(), "Section.key=value, repeatable");
  RunContext ctx;
  Status status = ctx.Init();
  if (!status.ok()) return ctx.Finish(status);
  po::variables_map vm;
  bool help = false;
  status = ParseCommandLine("check", args, options, &vm, &help);
  if (status.ok() && help) {
    if (ctx.runtime->rank() == 0)
      PrintCommandHelp("check", "[--config FILE] [-o Section.key=value ...]", options);
    return ctx.Finish(Status::Ok());
  }
  TrainConfig config;
  if (status.ok()) {
    if (config_path.empty()) overrides.push_back("Data.train_path=unused");
    auto loaded = LoadConfig(config_path, overrides);
    status = loaded.ok() ? ValidateConfig(&loaded.value(), ctx.runtime->size()) : loaded.status();
    if (status.ok()) config = loaded.value();
  }
  status = ctx.Agree(status);
  if (status.ok()) status = ctx.Agree(ctx.SetupDevice(config));
  if (status.ok()) status = ctx.Agree(ctx.BuildGroups(config));
  if (!status.ok()) return ctx.Finish(status);
  ctx.PrintRankMap();
  struct Group {
    const char* name;
    Communicator* comm;
  };
  const Group groups[] = {{"world", ctx.runtime->world()},
                          {"tp", ctx.mpi_groups.tp.get()},
                          {"dp", ctx.mpi_groups.dp.get()},
                          {"pp", ctx.mpi_groups.pp.get()}};
  for (const Group& g : groups) {
    double gbps = 0;
    status = ctx.Agree(CheckAllReduce(g.comm, g.name, size_t{1} << 22, &gbps));
    if (!status.ok()) return ctx.Finish(status);
    LogInfo(StrFormat("all-reduce on %-5s groups (size %d): exact, %.2f GB/s bus bandwidth "
                      "(host memory)",
                      g.name, g.comm->size(), gbps));
  }
  std::set<std::string> hosts(ctx.runtime->hosts().begin(), ctx.runtime->hosts().end());
  LogInfo(StrFormat("works well on %d ranks (%zu hosts, %d GPUs)", ctx.runtime->size(),
                    hosts.size(), ctx.device >= 0 ? ctx.runtime->size() : 0));
  return ctx.Finish(Status::Ok());
}

}  // namespace trainer
