// The trainer's subcommands. Each takes the arguments after its name and returns the process exit
// code (see ExitCode in common/status.h); main() dispatches and owns MPI_Init/Finalize.
#pragma once

#include <string>
#include <vector>

namespace trainer {

int RunTrainCommand(const std::vector<std::string>& args);
int RunPackCommand(const std::vector<std::string>& args);
int RunCheckCommand(const std::vector<std::string>& args);
int RunInspectCommand(const std::vector<std::string>& args);
int RunPlanCommand(const std::vector<std::string>& args);
int RunSampleCommand(const std::vector<std::string>& args);
int RunEvalCommand(const std::vector<std::string>& args);
int RunExportCommand(const std::vector<std::string>& args);
// `trainer --version`: version, commit, build settings and library versions on stdout.
int RunVersionCommand();

}  // namespace trainer
