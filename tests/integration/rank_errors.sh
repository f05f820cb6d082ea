#!/usr/bin/env bash
# A failure that only some ranks see is printed once, by a rank that holds its text, and every
# rank stops with its exit code. Two ranks resume with --resume auto, each in a folder of its own
# (mpirun's MPMD form): rank 0 finds the checkpoint a one-rank run left, rank 1 cannot see it.
# The checkpoint load agrees on the failure twice (inside the load, then at the top level), so
# rank 0 holds a failure without a message and must leave the printing to rank 1.
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
COMMON=(-c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path="$SCRATCH/data.h5"
        -o Data.val_fraction=0 -o Engine.output_dir=out -o Engine.max_steps=4
        -o Engine.save_steps=2 -o Engine.logging_freq=1 -o Engine.eval_freq=0)
mkdir a b
(cd a && "$TRAINER" train "${COMMON[@]}" > ../first.log 2>&1) || { cat first.log; fail "first run"; }
[ -f a/out/checkpoints/latest ] || fail "the first run left no checkpoint"

rc=0
timeout --kill-after=5 120 "$MPIEXEC" --oversubscribe --bind-to none \
  -n 1 --wdir "$SCRATCH/a" "$TRAINER" train "${COMMON[@]}" --resume auto : \
  -n 1 --wdir "$SCRATCH/b" "$TRAINER" train "${COMMON[@]}" --resume auto \
  > resume.out 2> resume.err || rc=$?
[[ $rc -ne 124 && $rc -ne 137 ]] || fail "the resume hung (killed by the time limit)"
[ $rc -eq 4 ] || { cat resume.err; fail "exit code $rc, expected 4 (checkpoint)"; }
[ "$(grep -c 'error: ' resume.err)" = 1 ] || { cat resume.err; fail "expected one error line"; }
grep -qE '^\[rank 1 [^]]*\] error: rank 0 resumes from out/checkpoints/step-0+4(/checkpoint.h5)?, which rank 1 cannot see' resume.err ||
  { cat resume.err; fail "the error line is not rank 1's, naming the checkpoint"; }
echo "ok: a load failure on rank 1 only -> exit 4 and rank 1's line: $(grep 'error: ' resume.err)"
