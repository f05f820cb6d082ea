# Launcher tests (label slurm): a real one-node Slurm cluster (scripts/slurm_local_cluster.sh) and
# network-namespace hosts for mpirun --hostfile (scripts/netns_hosts.sh). They need root, Slurm,
# munge and iproute2 (scripts/install_deps.sh --tests) and skip (77) without them; slurm_train also skips
# until the trainer has its train and pack subcommands. Each stops what it started.
# TIMEOUTs exceed the sum of each script's own time limits, so that a slow run still ends in the
# script's cleanup rather than in CTest's kill (which would leave the daemons running).
trainer_script_test(slurm_cluster SCRIPT slurm_cluster.sh LABELS slurm TIMEOUT 180)
trainer_script_test(netns_mpirun_hostfile SCRIPT netns_mpirun_hostfile.sh LABELS slurm TIMEOUT 120)
trainer_script_test(slurm_train SCRIPT slurm_train.sh LABELS slurm TIMEOUT 420)
# Both start a cluster on the same ports: never at the same time.
set_tests_properties(slurm_cluster slurm_train PROPERTIES RESOURCE_LOCK trainer_local_slurm)
