// What the launcher (mpirun, srun, mpiexec) says about the job from the environment it gives
// each process, read without MPI: by the MPI world check and by the one-process commands.
#pragma once

#include <string>

namespace trainer {

// Ranks the launcher started, from its environment: OMPI_COMM_WORLD_SIZE (mpirun), PMI_SIZE
// (MPICH/Intel MPI), or SLURM_STEP_NUM_TASKS when srun started this process directly. 0 when none
// is set; *variable gets "NAME=value".
int LauncherWorldSize(std::string* variable);

// This process's rank among them (OMPI_COMM_WORLD_RANK, PMI_RANK, or SLURM_PROCID alike); 0
// when none is set.
int LauncherRank();

}  // namespace trainer
