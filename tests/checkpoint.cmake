# Checkpoint tests (src/checkpoint): crash safety under SIGKILL, full and read-only disks, resume
# on other layouts, damaged files, shape mismatches, inspect, retention and preemption.
trainer_script_test(checkpoint_kill SCRIPT checkpoint_kill.sh LABELS "e2e;mpi" TIMEOUT 300)
trainer_script_test(checkpoint_integrity SCRIPT checkpoint_integrity.sh LABELS "e2e;mpi" TIMEOUT 240)
