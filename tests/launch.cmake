# `trainer check` and launch tests of the real trainer. check_local runs under plain mpiexec; the
# others (label slurm) need root for network-namespace hosts or the local Slurm cluster and skip
# (77) without them. TIMEOUTs exceed each script's own time limits, so that a slow run still ends
# in the script's cleanup (namespaces, daemons) rather than in CTest's kill.
# The one-rank parts of `trainer check` (compiled from src/cli/, which is part of the executable).
trainer_gtest(check_probes_test
              SOURCES unit/check_probes_test.cpp ${PROJECT_SOURCE_DIR}/src/cli/check_probes.cpp
                      ${PROJECT_SOURCE_DIR}/src/cli/check_report.cpp
                      ${PROJECT_SOURCE_DIR}/src/cli/check_gpu.cpp
                      ${PROJECT_SOURCE_DIR}/src/cli/check_hosts.cpp
              LIBS trainer_mpi trainer_model TIMEOUT 60)
trainer_script_test(check_local SCRIPT check_local.sh LABELS "e2e;mpi" TIMEOUT 120)
# slurm/*.sbatch and slurm/mpirun_hostfile.sh outside Slurm, with a job's environment set by hand.
trainer_script_test(batch_scripts SCRIPT batch_scripts.sh LABELS "e2e;mpi" TIMEOUT 300)
# The same over NCCL on 2 (or 4) GPUs: the pipeline's send/recv, the all-to-all, a corrupted
# transfer; skips (77) with fewer than 2 GPUs.
trainer_script_test(gpu_check SCRIPT gpu_check.sh LABELS "gpu;e2e;mpi" TIMEOUT 300)
trainer_script_test(check_netns SCRIPT check_netns.sh LABELS slurm TIMEOUT 240)
trainer_script_test(launch_netns_train SCRIPT launch_netns_train.sh LABELS slurm TIMEOUT 240)
trainer_script_test(launch_srun SCRIPT launch_srun.sh LABELS slurm TIMEOUT 240)
# Every test that starts the local Slurm cluster uses the same ports: one at a time.
set_tests_properties(launch_srun PROPERTIES RESOURCE_LOCK trainer_local_slurm)
