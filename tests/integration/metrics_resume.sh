#!/usr/bin/env bash
# metrics.jsonl over requeues and rewinds holds what one uninterrupted run logs (the reference:
# the same config trained straight through), each step once (docs/cli.md, "metrics"):
# - stopped at every step (Engine.exit_duration_min) and requeued, the evaluations due at the
#   steps where it stopped are run before it exits: val_loss at every eval_freq step;
# - stopped during the evaluation that follows a save (its val_loss lost), resumed: evaluated
#   first, records as one run;
# - a run killed before its first save and requeued with --resume auto (no checkpoint: a fresh
#   start) logs steps 1.. once, the killed run's records moved to metrics.jsonl.superseded;
# - gone back to step 4 with nothing to train (max_steps 4): metrics.jsonl unchanged;
# - gone back to step 4 with another learning rate and killed before its first save, then
#   --resume auto (which continues the old line from step 10): the old line's steps 5-10, not
#   the abandoned run's;
# - gone back to step 4 and saved at step 6: steps 5-6 are the new line's, the old line's 5-10
#   set aside.
source "$(dirname "$0")/lib.sh"
source "$TESTS_DIR/checkpoint_lib.sh"
make_small_dataset data.h5
COMMON=(-o Data.train_path=data.h5 -o Data.val_fraction=0.1 -o Global.device=cpu
        -o Model.hidden_size=32 -o Model.num_layers=1 -o Model.num_heads=2 -o Model.max_seq_len=32
        -o Global.global_batch_size=4 -o Global.micro_batch_size=2 -o Engine.logging_freq=1
        -o Engine.eval_freq=2 -o Engine.eval_iters=1 -o Optimizer.warmup_steps=2
        -o Optimizer.decay_steps=20 -o Engine.tensorboard=false -o Checkpoint.keep_last=0)
# "step key value" for every record's numeric loss and val_loss, in file order.
values() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for key in ("loss", "val_loss"):
        if key in r: print(r["step"], key, r[key])' "$1"
}
# old_line_to_14 WHEN: back/metrics.jsonl holds the reference's records, then steps 13-14 once.
old_line_to_14() {
  values back/metrics.jsonl > back.values
  head -n "$(wc -l < ref.values)" back.values | diff ref.values - ||
    fail "$1: not the old line's records (left: reference)"
  [ "$(awk '$2 == "loss" {print $1}' back.values | xargs)" = "$(seq -s ' ' 1 14)" ] ||
    fail "$1: steps logged $(awk '$2 == "loss" {print $1}' back.values | xargs)"
}
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=12 -o Engine.save_steps=2 \
  -o Engine.output_dir=ref > ref.log 2>&1 || { tail ref.log; fail "the reference run"; }
values ref/metrics.jsonl > ref.values
[ "$(grep -c val_loss ref.values)" -eq 6 ] || { cat ref.values; fail "reference: 6 evaluations"; }

# Stopped after every step (out of time at once) and requeued until done.
for i in $(seq 1 8); do
  rc=0
  run_np 1 train "${COMMON[@]}" -o Engine.max_steps=6 -o Engine.save_steps=100 \
    -o Engine.exit_duration_min=0.000001 -o Engine.output_dir=stopped --resume auto \
    > stopped.log 2>&1 || rc=$?
  [ "$rc" -eq 0 ] && break
  [ "$rc" -eq 75 ] || { tail stopped.log; fail "a stopped run exited $rc, expected 75"; }
done
[ "$rc" -eq 0 ] || fail "not done after 8 requeues"
values stopped/metrics.jsonl > stopped.values
diff <(head -n "$(wc -l < stopped.values)" ref.values) stopped.values ||
  fail "stopped at every step: the records differ from the uninterrupted run's (left: reference)"
[ "$(grep -c val_loss stopped.values)" -eq 3 ] || fail "stopped at every step: not 3 evaluations"
echo "ok: stopped after every step and requeued: losses and val_loss at steps 2, 4, 6 as one run"

# Stopped during the evaluation that follows step 4's save (its val_loss never written), then
# --resume auto: the evaluation runs first, and the records are the uninterrupted run's.
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=4 -o Engine.save_steps=2 \
  -o Engine.output_dir=owed > owed.log 2>&1 || { tail owed.log; fail "the run to step 4"; }
python3 - owed/metrics.jsonl <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines(True)
last = [i for i, l in enumerate(lines) if json.loads(l) == dict(json.loads(l), step=4) and "val_loss" in l]
assert len(last) == 1, lines
del lines[last[0]]
open(sys.argv[1], "w").write("".join(lines))
PY
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=6 -o Engine.save_steps=2 \
  -o Engine.output_dir=owed --resume auto > owed-on.log 2>&1 || { tail owed-on.log; fail "owed on"; }
grep -q "step      4: the evaluation due at the checkpoint resumed is not in metrics.jsonl" owed-on.log ||
  { cat owed-on.log; fail "no line about the evaluation owed"; }
diff <(head -n 9 ref.values) <(values owed/metrics.jsonl) ||
  fail "resumed after an evaluation cut short: not the uninterrupted run's records (left)"
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=8 -o Engine.save_steps=2 \
  -o Engine.output_dir=owed --resume auto > owed-done.log 2>&1 || { tail owed-done.log; fail "on"; }
! grep -q "evaluation due at the checkpoint resumed" owed-done.log ||
  fail "an evaluation logged already was run again"
echo "ok: stopped during the evaluation after a save: resumed, it evaluates first, once"

# Killed before its first save, requeued: a fresh start that logs each step once.
"$TRAINER" train "${COMMON[@]}" -o Engine.max_steps=100000 -o Engine.save_steps=1000 \
  -o Engine.output_dir=requeued > killed.log 2>&1 &
pid=$!
await $pid killed.log '[ "$(line_count requeued/metrics.jsonl)" -ge 5 ]'
kill -9 $pid
wait $pid || true
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=12 -o Engine.save_steps=2 \
  -o Engine.output_dir=requeued --resume auto > requeued.log 2>&1 ||
  { tail requeued.log; fail "the requeued run"; }
grep -q "record(s) of an earlier run that committed no checkpoint here, moved to requeued/metrics.jsonl.superseded" \
  requeued.log || { cat requeued.log; fail "no line about the killed run's records"; }
values requeued/metrics.jsonl | diff ref.values - || fail "requeued after a kill before any save"
[ "$(line_count requeued/metrics.jsonl.superseded)" -ge 5 ] || fail "the killed run's records are gone"
echo "ok: killed before its first save and requeued: each step once, as one run"

# Going back to step 4 with nothing to train changes nothing.
cp -r ref back
cp back/metrics.jsonl back.jsonl
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=4 -o Engine.save_steps=2 \
  -o Engine.output_dir=back --resume back/checkpoints/step-00000004 > nothing.log 2>&1 ||
  { tail nothing.log; fail "going back with nothing to do"; }
grep -q "nothing to do" nothing.log || { cat nothing.log; fail "no 'nothing to do'"; }
cmp back/metrics.jsonl back.jsonl || fail "going back with nothing to train changed metrics.jsonl"
[ ! -e back/metrics.jsonl.superseded ] || fail "going back with nothing to train set records aside"

# Going back to step 4 at another learning rate, killed before its first save (after logging
# past step 12, the old line's newest), then --resume auto: the old line resumes at step 12 with
# its own records, and trains on to 14.
"$TRAINER" train "${COMMON[@]}" -o Engine.max_steps=100000 -o Engine.save_steps=1000 \
  -o Optimizer.lr=5e-4 -o Engine.output_dir=back --resume back/checkpoints/step-00000004 \
  > abandoned.log 2>&1 &
pid=$!
await $pid abandoned.log '[ "$(line_count back/metrics.jsonl)" -ge $(($(line_count back.jsonl) + 15)) ]'
kill -9 $pid
wait $pid || true
cmp <(head -c "$(stat -c %s back.jsonl)" back/metrics.jsonl) back.jsonl ||
  fail "the run gone back changed the old line's records before saving anything"
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=14 -o Engine.save_steps=2 \
  -o Engine.output_dir=back --resume auto > returned.log 2>&1 || { tail returned.log; fail "returned"; }
grep -q "resumed from back/checkpoints/step-00000012 at step 12" returned.log ||
  { cat returned.log; fail "not back on the old line"; }
grep -q "record(s) after step 12 (logged past this checkpoint) or of a run that went back and committed no checkpoint, moved to" \
  returned.log || { cat returned.log; fail "no line about the abandoned run's records"; }
old_line_to_14 "after an abandoned rewind"
echo "ok: gone back and killed before saving, then --resume auto: the old line's records, once"

# Going back to step 4 and saving step 6: the new line's steps 5-6, the old line's aside.
rm -r back && cp -r ref back
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=6 -o Engine.save_steps=2 -o Optimizer.lr=5e-4 \
  -o Engine.output_dir=back --resume back/checkpoints/step-00000004 > rewound.log 2>&1 ||
  { tail rewound.log; fail "the rewound run"; }
grep -q "record(s) after step 4, of the line of training this run went back from, moved to" rewound.log ||
  { cat rewound.log; fail "no line about the old line's records"; }
[ "$(values back/metrics.jsonl | cut -d' ' -f1,2 | xargs)" = "$(head -n 9 ref.values | cut -d' ' -f1,2 | xargs)" ] ||
  fail "after the rewind: $(values back/metrics.jsonl | cut -d' ' -f1,2 | xargs)"
values back/metrics.jsonl > back.values
diff <(head -n 6 back.values) <(head -n 6 ref.values) || fail "steps 1-4 changed"
# Step 6's loss is the first the new learning rate moves (step 5's update).
! diff -q <(sed -n 8p back.values) <(sed -n 8p ref.values) > /dev/null ||
  fail "step 6 is the old line's, not the new learning rate's"
[ ! -e back/metrics.jsonl.branch ] || fail "metrics.jsonl.branch left after the save"
[ "$(values back/metrics.jsonl.superseded | awk '$2 == "loss"' | cut -d' ' -f1 | xargs)" = "$(seq -s ' ' 5 12)" ] ||
  fail "set aside: $(values back/metrics.jsonl.superseded | cut -d' ' -f1 | xargs)"
echo "ok: gone back to step 4 and saved step 6: steps 5-6 of the new line, 5-12 of the old aside"

# The same run stopped between its commit of step 6 and moving the old line's records (a kill in
# the step after an asynchronous save): rebuilt from the settled folder, the old line's records,
# then the new run's after the marker. --resume auto resumes at its step 6 and settles first:
# then on to step 8, as the settled folder does.
cp -r back settled
python3 - ref/metrics.jsonl back/metrics.jsonl <<'PY'
import json, sys
old = open(sys.argv[1]).read()
new = open(sys.argv[2]).read().splitlines(True)
kept = sum(1 for line in old.splitlines() if json.loads(line)["step"] <= 4)
open(sys.argv[2], "w").write(old + "".join(new[kept:]))
open(sys.argv[2] + ".branch", "w").write("%d 4\n" % len(old.encode()))
PY
rm back/metrics.jsonl.superseded
touch -d '1 hour ago' back/metrics.jsonl.branch
for run in back settled; do
  run_np 1 train "${COMMON[@]}" -o Engine.max_steps=8 -o Engine.save_steps=2 -o Optimizer.lr=5e-4 \
    -o Engine.output_dir=$run --resume auto > $run-on.log 2>&1 || { tail $run-on.log; fail "$run on"; }
done
grep -q "resumed from back/checkpoints/step-00000006 at step 6" back-on.log || fail "not at step 6"
diff <(values settled/metrics.jsonl) <(values back/metrics.jsonl) ||
  fail "stopped before settling, then resumed: not the settled run's records (left)"
echo "ok: stopped between the commit and the move, then --resume auto: as the settled run"

# A torn last line before a run goes back (a crash mid-write) is moved aside, not joined to the
# next record; and a run gone back that saves nothing leaves the old line in place for the next
# --resume auto (its step folders stay, and it returns to them).
rm -r back && cp -r ref back
printf '{"step": 13, "loss": 5.1' >> back/metrics.jsonl
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=6 -o Engine.save_steps=0 -o Optimizer.lr=5e-4 \
  -o Engine.output_dir=back --resume back/checkpoints/step-00000004 > unsaved.log 2>&1 ||
  { tail unsaved.log; fail "the rewound run that saves nothing"; }
python3 -c "import json, sys; [json.loads(l) for l in open(sys.argv[1])]" back/metrics.jsonl ||
  fail "a torn line is left in metrics.jsonl"
run_np 1 train "${COMMON[@]}" -o Engine.max_steps=14 -o Engine.save_steps=2 \
  -o Engine.output_dir=back --resume auto > unsaved-on.log 2>&1 || { tail unsaved-on.log; fail "on"; }
grep -q "resumed from back/checkpoints/step-00000012 at step 12" unsaved-on.log || fail "not at 12"
old_line_to_14 "after a rewound run that saved nothing"
echo "ok: a torn line moved aside; a rewound run that saved nothing leaves the old line's records"
echo PASS
