#!/usr/bin/env bash
# A checkpoint folder over more than one run (docs/checkpoint-format.md, "Going back"):
# - a run without --resume in a folder that holds checkpoints: exit 4 on both ranks, one line
#   naming the folder, its newest step and --resume auto; nothing in the folder changes; nor with
#   --resume of another folder's step (which branches into an empty folder);
# - at start only step-<digits>.tmp and latest.tmp are removed, other *.tmp entries stay;
# - rewinding (--resume step-4 of a run that reached step 10, keep_last=2) to step 6: steps 8
#   and 10 are set aside as .superseded, retention keeps 4 and 6 (not the abandoned 8 and 10);
# - with `latest` on step 6 and a step 10 folder present, a damaged step 6 under --resume auto
#   falls back to step 4 (older), never to step 10, and redoes steps 5-6 with the first run's
#   losses; `trainer inspect` and `trainer eval` of the folder take the step `latest` names;
# - without `latest`, `trainer inspect FOLDER` inspects the newest committed step; with `latest`
#   on a folder that is gone, the newest step below it; a hand-written "step-6" is step 6, and
#   text that names no step is ignored with a warning (inspect and --resume auto).
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=32 -o Model.num_layers=1 -o Model.num_heads=2 -o Model.max_seq_len=32
        -o Global.global_batch_size=4 -o Global.micro_batch_size=2 -o Engine.logging_freq=1
        -o Engine.eval_freq=0 -o Optimizer.warmup_steps=2 -o Engine.save_steps=2
        -o Optimizer.decay_steps=8 -o Engine.output_dir=run)
CKPT=run/checkpoints
steps() { (cd "$1" && ls -d step-* | grep -E '^step-[0-9]+$' | xargs); }  # committed ones
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=10 -o Checkpoint.keep_last=0 > first.log 2>&1 ||
  { tail first.log; fail "first run"; }
cp run/metrics.jsonl first.jsonl
[ "$(steps $CKPT)" = "step-00000002 step-00000004 step-00000006 step-00000008 step-00000010" ] ||
  fail "first run kept $(steps $CKPT)"

# A fresh run in the used folder is refused, on every rank, before it changes anything.
before=$(steps $CKPT; cat $CKPT/latest; line_count run/metrics.jsonl)
set +e
run_np 2 train "${COMMON[@]}" -o Engine.max_steps=4 > fresh.log 2>&1
rc=$?
set -e
[ "$rc" -eq 4 ] || { cat fresh.log; fail "a fresh run in a used Checkpoint.dir exited $rc, expected 4"; }
one_error_line fresh.log "already holds checkpoints ($CKPT, Checkpoint.dir; newest step-00000010).*--resume auto"
[ "$before" = "$(steps $CKPT; cat $CKPT/latest; line_count run/metrics.jsonl)" ] ||
  fail "the refused run changed the folder or the metrics"
echo "ok: a run without --resume in a used Checkpoint.dir stops with exit 4 and one line"
# Resuming another folder's step into this used one would mix two lines of training: refused the
# same way. Into an empty folder it branches (steps 6 and 8 from that run's step 4).
cp -r run other && rm -r other/checkpoints/step-0000000[68]* other/checkpoints/step-00000010
set +e
run_np 2 train "${COMMON[@]}" -o Engine.max_steps=8 --resume other/checkpoints/step-00000004 \
  > foreign.log 2>&1
rc=$?
set -e
[ "$rc" -eq 4 ] || { cat foreign.log; fail "resuming another folder's step exited $rc, expected 4"; }
one_error_line foreign.log "resume other/checkpoints/step-00000004 is a checkpoint of another folder, and Checkpoint.dir ($CKPT) holds checkpoints of its own (newest step-00000010)"
[ "$before" = "$(steps $CKPT; cat $CKPT/latest; line_count run/metrics.jsonl)" ] ||
  fail "the refused resume changed the folder or the metrics"
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=8 -o Engine.output_dir=branch \
  --resume other/checkpoints/step-00000004 > branch.log 2>&1 || { tail branch.log; fail "branch"; }
[ "$(steps branch/checkpoints)" = "step-00000006 step-00000008" ] || fail "branch: $(steps branch/checkpoints)"
rm -r other branch
echo "ok: --resume of another folder's step: refused into a used folder, a branch into an empty one"

# Rewind to step 4 with keep_last=2; stray *.tmp entries of the user's stay.
mkdir -p $CKPT/step-00000012.tmp $CKPT/notes.tmp $CKPT/step-00000001.removing
echo mine > $CKPT/plan.tmp  # a step-N.removing is a retention's removal cut short: removed too
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=6 -o Checkpoint.keep_last=2 \
  --resume $CKPT/step-00000004 > rewind.log 2>&1 || { tail rewind.log; fail "rewound run"; }
grep -q "removing incomplete checkpoint $CKPT/step-00000012.tmp" rewind.log ||
  fail "no warning for step-00000012.tmp"
[ ! -e $CKPT/step-00000012.tmp ] || fail "step-00000012.tmp was not removed"
[ ! -e $CKPT/step-00000001.removing ] || fail "step-00000001.removing was not removed"
! grep -q "removing" <(ls $CKPT) || fail "retention left a step-N.removing: $(ls $CKPT)"
[ -d $CKPT/notes.tmp ] && [ "$(cat $CKPT/plan.tmp)" = mine ] ||
  fail "a *.tmp entry that no save writes was removed"
! grep -q "notes.tmp\|plan.tmp" rewind.log || fail "the log names the user's *.tmp entries"
[ "$(steps $CKPT)" = "step-00000004 step-00000006" ] ||
  fail "after rewinding to step 4 and saving step 6 (keep_last=2): $(steps $CKPT), expected 4 and 6"
[ -d $CKPT/step-00000008.superseded ] && [ -d $CKPT/step-00000010.superseded ] ||
  fail "steps 8 and 10 of the abandoned line were not set aside: $(ls $CKPT)"
[ "$(latest_step $CKPT)" = 6 ] || fail "latest is $(cat $CKPT/latest), expected step 6"
[ "$(grep -c 'warning: set aside step-00000008.superseded, step-00000010.superseded' rewind.log)" -eq 1 ] ||
  { cat rewind.log; fail "no single warning naming the set-aside steps"; }
echo "ok: rewinding keeps steps 4 and 6, sets aside 8 and 10, leaves the user's *.tmp entries"

# A step folder newer than `latest` (put back by hand): the fallback from a damaged step 6 goes
# to step 4, and inspect/eval of the folder follow `latest`.
mv $CKPT/step-00000010.superseded $CKPT/step-00000010
"$TRAINER" inspect $CKPT > inspect.out 2>&1 || { cat inspect.out; fail "inspect $CKPT"; }
grep -q "^checkpoint $CKPT/step-00000006/checkpoint.h5" inspect.out ||
  { cat inspect.out; fail "inspect of the folder did not take latest (step 6)"; }
"$TRAINER" eval $CKPT --data data.h5 --batches 1 > eval.out 2> eval.err ||
  { cat eval.err; fail "eval $CKPT"; }
grep -q '"step": 6,' eval.out || { cat eval.out; fail "eval of the folder did not take latest (step 6)"; }
echo "ok: inspect and eval of the folder take step 6 (latest), not the newer step 10"
flip_tensor_byte $CKPT/step-00000006/checkpoint.h5 /model/transformer.wte.weight
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=6 -o Checkpoint.keep_last=2 --resume auto \
  > fallback.log 2>&1 || { tail fallback.log; fail "resume auto after damaging step 6"; }
grep -q "resumed from $CKPT/step-00000004 at step 4" fallback.log ||
  { cat fallback.log; fail "--resume auto did not fall back to step 4"; }
[ -d $CKPT/step-00000006.damaged ] || fail "the damaged step 6 was not set aside"
[ -d $CKPT/step-00000010.superseded ] || fail "step 10 was not set aside at the save of step 6"
[ "$(steps $CKPT)" = "step-00000004 step-00000006" ] || fail "after the fallback: $(steps $CKPT)"
# The resumed run moved what was logged past step 4 aside: steps 5 and 6 are the redone ones.
compare_step_losses run/metrics.jsonl first.jsonl 0 5 || fail "steps 5-6 redone from step 4 differ"
echo "ok: a damaged step 6 falls back to step 4, not the newer step 10; steps 5-6 as the first run"

# No `latest`: inspect takes the newest committed step.
rm $CKPT/latest
"$TRAINER" inspect $CKPT > inspect.out 2>&1 || { cat inspect.out; fail "inspect without latest"; }
grep -q "^checkpoint $CKPT/step-00000006/checkpoint.h5" inspect.out ||
  { cat inspect.out; fail "inspect without latest did not take the newest step"; }
echo "ok: inspect of a folder without latest takes its newest step"
# `latest` naming a folder that is gone: the newest step below it, never one above.
mv $CKPT/step-00000010.superseded $CKPT/step-00000010
echo step-00000005 > $CKPT/latest
"$TRAINER" inspect $CKPT > inspect.out 2>&1 || { cat inspect.out; fail "inspect with latest gone"; }
grep -q "^checkpoint $CKPT/step-00000004/checkpoint.h5" inspect.out ||
  { cat inspect.out; fail "inspect with latest on a missing step 5 did not take step 4"; }
echo "ok: with latest on a missing step 5, inspect takes step 4, not step 10"
# A hand-edited `latest`: "step-6" is step 6; text that names no step is ignored with a warning
# (the newest step), not taken for a damaged checkpoint; --resume auto resumes the same way.
echo step-6 > $CKPT/latest
"$TRAINER" inspect $CKPT > inspect.out 2>&1 || { cat inspect.out; fail "inspect with latest step-6"; }
grep -q "^checkpoint $CKPT/step-00000006/checkpoint.h5" inspect.out ||
  { cat inspect.out; fail "inspect with latest 'step-6' did not take step 6"; }
echo "garbage text" > $CKPT/latest
"$TRAINER" inspect $CKPT > inspect.out 2>&1 || { cat inspect.out; fail "inspect with garbage latest"; }
grep -q "^checkpoint $CKPT/step-00000010/checkpoint.h5" inspect.out &&
  grep -q "^warning: $CKPT/latest names 'garbage text', which is no step folder" inspect.out ||
  { cat inspect.out; fail "inspect with a garbage latest"; }
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=11 --resume auto > garbage.log 2>&1 ||
  { tail garbage.log; fail "resume auto with a garbage latest"; }
grep -q "resumed from $CKPT/step-00000010 at step 10" garbage.log || { cat garbage.log; fail "garbage latest"; }
echo "ok: latest 'step-6' is step 6; a latest that names no step is ignored with a warning"
echo PASS
