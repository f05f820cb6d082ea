# The bench tools' own logic: bench/timeline_summary.py on a synthetic timeline, and
# bench/trainer_ab.sh with stand-in trainers, both with closed-form figures (the tools that need a
# GPU run only on the GPU machine).
trainer_script_test(timeline_summary SCRIPT timeline_summary.sh LABELS "unit" TIMEOUT 60)
trainer_script_test(trainer_ab SCRIPT trainer_ab.sh LABELS "unit" TIMEOUT 120)
