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

# Ranks started with other command lines (MPMD, a wrapper script): one line naming the first rank
# that differs, exit 2, no hang (--help or --print-config on one rank left the others waiting in
# their first collective; train beside check was a raw MPI_ERR_TRUNCATE).
mpmd() {  # name code "args of rank 0" "args of rank 1"
  local name=$1 code=$2 rc=0
  read -ra zero <<< "$3"
  read -ra one <<< "$4"
  timeout --kill-after=5 120 "$MPIEXEC" --oversubscribe --bind-to none \
    -n 1 --wdir "$SCRATCH/a" "$TRAINER" "${zero[@]}" : -n 1 --wdir "$SCRATCH/a" "$TRAINER" "${one[@]}" \
    > "$name.out" 2> "$name.err" || rc=$?
  [[ $rc -ne 124 && $rc -ne 137 ]] || fail "$name: hung (killed by the time limit)"
  [ $rc -eq "$code" ] || { cat "$name.err"; fail "$name: exit code $rc, expected $code"; }
  [ "$(grep -c 'error: ' "$name.err")" = 1 ] || { cat "$name.err"; fail "$name: expected one error line"; }
}
TRAIN="train ${COMMON[*]}"
mpmd help 2 "$TRAIN" "$TRAIN --help"
grep -qE "^\[rank 1 [^]]*\] error: rank 1 \([^)]*\) runs \`trainer train --help\`, rank 0 \`trainer train\`: every rank of a run needs the same command line" help.err ||
  { cat help.err; fail "help: not rank 1's line naming both command lines"; }
mpmd print 2 "$TRAIN --print-config" "$TRAIN"
grep -q "runs \`trainer train\`, rank 0 \`trainer train --print-config\`" print.err ||
  { cat print.err; fail "print: not the line naming both command lines"; }
mpmd commands 2 "$TRAIN" "check ${COMMON[*]}"
grep -q "runs \`trainer check\`, rank 0 \`trainer train\`" commands.err ||
  { cat commands.err; fail "commands: not the line naming both commands"; }
echo "ok: --help, --print-config or another command on one rank -> exit 2: $(grep 'error: ' commands.err)"
# trainer pack started as two processes of one output (mpirun -n 2): each writes a temporary file
# of its own and the last rename wins (one .tmp name made the second fail on the first's lock,
# remove it, and the first fail to rename: no output at all).
run_np 2 pack --input "$SRC/README.md" --output packed.h5 --force > pack2.log 2>&1 ||
  { cat pack2.log; fail "two packs of one output"; }
"$TRAINER" inspect packed.h5 > /dev/null || fail "packed.h5 of two packs does not open"
! ls packed.h5.*tmp 2> /dev/null || fail "a temporary file of the two packs was left"
echo "ok: trainer pack under mpirun -n 2 -> exit 0, one whole packed.h5"

# Node-local copies that are not rank 0's (another run's step under the same name, an earlier
# step's file, other weights to start from): exit 4 and one line naming the rank and both
# fingerprints, where they resumed (or started) the replicas apart, or hung. The same copy on
# each node passes.
(cd b && "$TRAINER" train "${COMMON[@]}" -o Global.seed=5 > ../other.log 2>&1) ||
  { cat other.log; fail "the other run"; }
two_folders() {  # name code args...: rank 0 in a, rank 1 in b
  local name=$1 code=$2 rc=0
  shift 2
  timeout --kill-after=5 120 "$MPIEXEC" --oversubscribe --bind-to none \
    -n 1 --wdir "$SCRATCH/a" "$TRAINER" "$@" : -n 1 --wdir "$SCRATCH/b" "$TRAINER" "$@" \
    > "$name.out" 2> "$name.err" || rc=$?
  [[ $rc -ne 124 && $rc -ne 137 ]] || fail "$name: hung (killed by the time limit)"
  [ $rc -eq "$code" ] || { cat "$name.err"; fail "$name: exit code $rc, expected $code"; }
  [[ $code -eq 0 || $1 == check ]] || [ "$(grep -c 'error: ' "$name.err")" = 1 ] ||
    { cat "$name.err"; fail "$name: expected one error line"; }
}
MORE=(-o Engine.max_steps=6)
two_folders other_run 4 train "${COMMON[@]}" "${MORE[@]}" --resume auto
grep -qE "^\[rank 1 [^]]*\] error: rank 1's out/checkpoints/step-00000004 is not rank 0's \(step 4, 64 samples, [0-9]+ tokens, tensors CRC-32 [0-9a-f]{8} here, step 4, 64 samples, [0-9]+ tokens, tensors CRC-32 [0-9a-f]{8} on rank 0\): every rank must resume from the same checkpoint" other_run.err ||
  { cat other_run.err; fail "other_run: not rank 1's line with both fingerprints"; }
# An earlier step's file under step 4's name.
rm -rf b/out && cp -r a/out b/out && cp b/out/checkpoints/step-00000002/checkpoint.h5 b/out/checkpoints/step-00000004/
two_folders stale_step 4 train "${COMMON[@]}" "${MORE[@]}" --resume auto
grep -q "rank 1's out/checkpoints/step-00000004 is not rank 0's (step 2, " stale_step.err ||
  { cat stale_step.err; fail "stale_step: not the line naming step 2"; }
echo "ok: another copy of the resumed step on rank 1 -> exit 4: $(grep -o "error: .*: every" stale_step.err)"
# Checkpoint.init_from: another run's weights on rank 1; then the same copy on both.
cp -r a/out/checkpoints a/init && rm -rf b/init && (cd b && "$TRAINER" train "${COMMON[@]}" \
  -o Global.seed=5 -o Engine.output_dir=other > ../other2.log 2>&1) && cp -r b/other/checkpoints b/init
INIT=(-o Checkpoint.init_from=init -o Engine.output_dir=fresh -o Engine.max_steps=1)
two_folders init_other 4 train "${COMMON[@]}" "${INIT[@]}"
grep -q "rank 1's init/step-00000004/checkpoint.h5 (Checkpoint.init_from) is not rank 0's (step 4, weights CRC-32 " init_other.err ||
  { cat init_other.err; fail "init_other: not rank 1's line"; }
"$TRAINER" export a/init --output a/hf > /dev/null && "$TRAINER" export b/init --output b/hf > /dev/null ||
  fail "exports"
two_folders hf_other 4 train "${COMMON[@]}" "${INIT[@]}" -o Checkpoint.init_from=hf
grep -q "rank 1's hf/model.safetensors (Checkpoint.init_from) is not rank 0's ([0-9]* bytes, head/tail CRC-32 " hf_other.err ||
  { cat hf_other.err; fail "hf_other: not rank 1's line"; }
# A node-local config.json that only rank 1's check refuses (n_head): every rank stops at once
# (rank 1 returned alone before the data's agreement, the others waited for the watchdog).
rm -rf b/hf && cp -r a/hf b/ && python3 -c 'import json; c = json.load(open("b/hf/config.json")); c["n_head"] = 2; json.dump(c, open("b/hf/config.json", "w"))'
two_folders hf_config 4 train "${COMMON[@]}" "${INIT[@]}" -o Checkpoint.init_from=hf -o Engine.watchdog_s=60
grep -q "^\[rank 1 [^]]*\] error: hf/config.json: n_head 2, the config's Model.num_heads 4" hf_config.err ||
  { cat hf_config.err; fail "hf_config: not rank 1's line"; }
rm -rf b/init b/hf b/fresh && cp -r a/init a/hf b/
two_folders init_same 0 train "${COMMON[@]}" "${INIT[@]}"
two_folders hf_same 0 train "${COMMON[@]}" "${INIT[@]}" -o Checkpoint.init_from=hf -o Engine.output_dir=fresh_hf
echo "ok: other Checkpoint.init_from weights on rank 1 -> exit 4 (a checkpoint, a Hugging Face folder); the same copies train"

# Node-local data files of one size but other contents (training, then validation): counts alone
# agreed, so each rank trained (or evaluated) other samples with exit 0. Now exit 3 and rank 1's
# line; trainer check says the same (exit 5). The same copies train.
pack_in() {  # folder seed output: 40000 random characters of 9 (one size for every seed), packed
  python3 -c "import random; random.seed('$2'); open('$1/x.txt', 'w').write(''.join(random.choice('abcdefgh \n') for _ in range(40000)))"
  (cd "$1" && "$TRAINER" pack --input x.txt --output "$3" --force --quiet) || fail "pack in $1"
}
pack_in a one t.h5 && pack_in b two t.h5
DATA=(-o Data.train_path=t.h5 -o Engine.output_dir=data_run -o Engine.max_steps=1)
two_folders data_other 3 train "${COMMON[@]}" "${DATA[@]}"
grep -qE "^\[rank 1 [^]]*\] error: rank 1 sees other data than rank 0 \(Data.train_path t.h5\): training [0-9]+ samples in 1 files \(CRC-32 [0-9a-f]{8}\) here, training [0-9]+ samples in 1 files \(CRC-32 [0-9a-f]{8}\) on rank 0" data_other.err ||
  { cat data_other.err; fail "data_other: not rank 1's line"; }
cp a/t.h5 b/t.h5 && pack_in a three v.h5 && pack_in b four v.h5
VAL=(-o Data.val_path=v.h5 -o Engine.eval_freq=1)
two_folders val_other 3 train "${COMMON[@]}" "${DATA[@]}" "${VAL[@]}"
grep -q "rank 1 sees other data than rank 0 (Data.train_path t.h5, Data.val_path v.h5): training [^;]*; validation [^;]* here" val_other.err ||
  { cat val_other.err; fail "val_other: not rank 1's line naming the validation set"; }
cp a/v.h5 b/v.h5
two_folders data_same 0 train "${COMMON[@]}" "${DATA[@]}" "${VAL[@]}" -o Engine.output_dir=same_run
pack_in b two t.h5
two_folders check_other 5 check "${COMMON[@]}" "${DATA[@]}"
grep -q "error: data file (rank 1 on .*): t.h5 differs from rank 0's copy on .* (training .* here, training .* there)" check_other.err ||
  { cat check_other.out check_other.err; fail "check_other: not the data file line"; }
echo "ok: data of one size but other contents on rank 1 -> train exit 3 (training, validation), check exit 5"
