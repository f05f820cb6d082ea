// trainer: one binary, several subcommands (train, pack, check, inspect, plan, sample, eval,
// export). main() only dispatches; each subcommand returns its exit code (docs/cli.md).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "usage: trainer <command> [options]\n\n"
               "commands:\n"
               "  train    train a GPT (run under mpirun/srun; one rank per GPU or CPU slot)\n"
               "  pack     turn text or token files into an HDF5 dataset\n"
               "  check    check the environment and collectives under the launcher\n"
               "  inspect  summarise a dataset or a checkpoint (and verify it)\n"
               "  plan     estimate memory per rank for a config and layout\n"
               "  sample   generate text (or token ids) from a checkpoint\n"
               "  eval     the loss of a checkpoint's model on a token file\n"
               "  export   a checkpoint's model (or LoRA adapters) as a Hugging Face folder\n\n"
               "'trainer <command> --help' lists the command's options with their defaults;\n"
               "'trainer --version' the version, commit, build and library versions.\n"
               "Exit codes: 0 done, 1 runtime, 2 usage/config, 3 data, 4 checkpoint,\n"
               "            5 environment, 6 diverged, 75 preempted after saving (requeue).\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    PrintUsage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version"))
    return trainer::RunVersionCommand();
  const std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "train") return trainer::RunTrainCommand(args);
  if (command == "pack") return trainer::RunPackCommand(args);
  if (command == "check") return trainer::RunCheckCommand(args);
  if (command == "inspect") return trainer::RunInspectCommand(args);
  if (command == "plan") return trainer::RunPlanCommand(args);
  if (command == "sample") return trainer::RunSampleCommand(args);
  if (command == "eval") return trainer::RunEvalCommand(args);
  if (command == "export") return trainer::RunExportCommand(args);
  std::fprintf(stderr, "error: unknown command '%s'. Run 'trainer --help' for the list\n",
               command.c_str());
  return 2;
}
