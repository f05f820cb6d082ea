// `trainer train`: parse options and config, validate against the world size on every rank,
// choose the device, build the process groups, then set up and run the Trainer. Every failure
// ends all ranks with one line and a non-zero exit code (docs/cli.md).
#include <sys/prctl.h>
#include <unistd.h>

#include <iostream>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/run_context.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "engine/signals.h"
#include "engine/trainer.h"
#include "mpi_bootstrap/watchdog.h"

namespace trainer {
namespace {

// TRAINER_WAIT_FOR_DEBUGGER=<rank>: that rank prints its PID and host and waits until a debugger
// sets `debugger_attached` (gdb -p PID, then: set var debugger_attached=1, continue), or until a
// preemption signal (scancel) ends the wait: the run then stops as at any step boundary.
volatile int debugger_attached = 0;
void MaybeWaitForDebugger(int rank, const std::string& host) {
  const char* wanted = std::getenv("TRAINER_WAIT_FOR_DEBUGGER");
  if (wanted == nullptr || std::atoi(wanted) != rank) return;
  // Yama's ptrace_scope=1 (Ubuntu's default) lets only an ancestor attach: allow any process of
  // this user, such as a gdb started from another shell or srun step.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  std::fprintf(stderr,
               "[rank %d %s] waiting for a debugger: gdb -p %d, then 'set var "
               "debugger_attached=1' and 'continue'\n",
               rank, host.c_str(), static_cast<int>(getpid()));
  while (!debugger_attached && !PreemptionRequested()) sleep(1);
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer train options");
  std::string config_path, resume;
  std::vector<std::string> overrides;
  options.add_options()("config,c", po::value(&config_path)->default_value(""),
                        "YAML config file (configs/*.yaml); empty: built-in defaults")(
      "override,o", po::value(&overrides)->composing(),
      "Section.key=value, repeatable (e.g. -o Engine.max_steps=50)")(
      "resume", po::value(&resume)->default_value(""),
      "auto (Checkpoint.dir's newest checkpoint that verifies, if any), a checkpoint folder (its "
      "newest that verifies) or a step folder; overrides Checkpoint.resume")(
      "print-config", "print the resolved config (a YAML file that -c reads back) and exit");

  // From here on a preemption signal (scancel's SIGTERM, Slurm's USR1, Ctrl-C) only sets a flag:
  // one during set-up (MPI's start-up included, which takes long on large jobs) stops the run at
  // the first step boundary with a checkpoint (exit 75), as one during training does. Installed
  // again once MPI has started, so that rank 0 announces a Ctrl-C.
  InstallPreemptionHandlers();
  // Watched from the start, at the default timeout until the config gives its own: a rank stuck
  // in MPI's start-up or on a config file (a hung mount) ends every rank instead of hanging.
  Watchdog watchdog(TrainConfig{}.engine.watchdog_s);
  watchdog.Beat("the start-up (MPI, the command line and the config, agreed by every rank)");
  RunContext ctx;
  Status status = ctx.Init();
  if (!status.ok()) return ctx.Finish(status);
  InstallPreemptionHandlers(ctx.runtime->rank() == 0);
  MaybeWaitForDebugger(ctx.runtime->rank(), ctx.runtime->host());

  po::variables_map vm;
  bool help = false;
  status = ctx.ParseAgreedCommandLine("train", args, options, &vm, &help);
  if (!status.ok()) return ctx.Finish(status);
  if (help) {
    if (ctx.runtime->rank() == 0)
      PrintCommandHelp(
          "train", "--config FILE [-o Section.key=value ...] [--resume auto|PATH] [--print-config]",
          options);
    return ctx.Finish(Status::Ok());
  }
  TrainConfig config;
  if (status.ok()) {
    auto loaded = LoadConfig(config_path, overrides);
    // The path as given: not through YAML, where " #" would start a comment and "~" mean null.
    if (loaded.ok() && !resume.empty()) loaded.value().checkpoint.resume = resume;
    status = loaded.ok() ? ValidateConfig(&loaded.value(), ctx.runtime->size()) : loaded.status();
    if (status.ok()) config = loaded.value();
  }
  // Every rank parsed the same files: the verdict is the same, rank 0 prints it.
  status = ctx.Agree(status);
  if (!status.ok()) return ctx.Finish(status);
  status = ctx.AgreeOnConfig(config);
  if (!status.ok()) return ctx.Finish(status);
  if (vm.count("print-config")) {  // the YAML alone, as `-c` reads it back
    LogInfo(FormatConfig(config));
    return ctx.Finish(Status::Ok());
  }
  for (const std::string& notice : config.notices) LogInfo(notice);
  LogInfo("resolved config:\n" + FormatConfig(config));

  // The device, the communicators (NCCL's set-up), the memory check, at the config's timeout.
  watchdog.SetTimeout(config.engine.watchdog_s);
  watchdog.Beat("setting up the device and the communicators");
  status = ctx.Agree(ctx.SetupDevice(config));
  if (status.ok()) status = ctx.Agree(ctx.BuildGroups(config));
  if (!status.ok()) return ctx.Finish(status);
  ctx.PrintRankMap();
  std::string memory;
  status = ctx.Agree(ctx.CheckMemory(config, &memory));
  if (!status.ok()) return ctx.Finish(status);
  if (!memory.empty()) LogInfo("memory: " + memory);

  Trainer trainer(config, ctx.groups, ctx.backend.get());
  watchdog.Beat("the trainer's set-up");
  trainer.set_progress(&watchdog);
  status = trainer.Setup();
  // Rank 0 may still wait for the checkpoint folder's lock, which it reports itself.
  AwaitRoot(&watchdog, ctx.runtime->rank(), "rank 0's set-up (the checkpoint folder's lock)");
  status = ctx.Agree(status);
  if (status.ok()) {
    watchdog.Beat("restoring the model's state");
    status = ctx.Agree(trainer.Restore());
  }
  if (status.ok()) status = ctx.Agree(trainer.PrepareCheckpointSaves());
  if (status.ok()) status = trainer.Run();
  // An error on this rank stops every rank (ctx.Finish): rank 0 first commits a checkpoint that
  // its background writer has in flight, after saying what went wrong (the wait may be long).
  if (!status.ok()) {
    ctx.SayNow(status);
    trainer.WaitForCheckpointWrite();
  }
  return ctx.Finish(status);
}

}  // namespace trainer
