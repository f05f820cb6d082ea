// LauncherWorldSize (launcher.h).
#include "common/launcher.h"

#include <cstdlib>

namespace trainer {

int LauncherWorldSize(std::string* variable) {
  // mpirun's own variables first: under mpirun inside a Slurm allocation, SLURM_STEP_NUM_TASKS
  // counts mpirun's daemons, not the ranks.
  const bool direct_srun = std::getenv("SLURM_PROCID") != nullptr;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    if (std::string(name) == "SLURM_STEP_NUM_TASKS" && !direct_srun) continue;
    *variable = std::string(name) + "=" + value;
    return std::atoi(value);
  }
  variable->clear();
  return 0;
}

}  // namespace trainer
