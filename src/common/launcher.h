// What the launcher (mpirun, srun, mpiexec) says about the job from the environment it gives
// each process, read without MPI (trainer check's MPI world check).
#pragma once

#include <string>

namespace trainer {

// Ranks the launcher started, from its environment: OMPI_COMM_WORLD_SIZE (mpirun), PMI_SIZE
// (MPICH/Intel MPI), or SLURM_STEP_NUM_TASKS when srun started this process directly. 0 when none
// is set; *variable gets "NAME=value".
int LauncherWorldSize(std::string* variable);

}  // namespace trainer
