#!/usr/bin/env bash
# The TensorBoard event file holds what metrics.jsonl holds: read back by an independent decoder
# (tfevents.py: TFRecord framing with masked CRC-32C, the protobuf fields by hand, Python stdlib).
# Every run's file starts with a SessionLog START (Event field 7, tensorflow's event.proto) at
# its first step. Then a run killed (SIGKILL) past its last checkpoint and resumed: metrics.jsonl
# holds each step's loss once, and the event files, read with TensorBoard's purge rule (the first
# START of a folder starts the session; each later START at step S drops the events before it of
# steps >= S), hold exactly what metrics.jsonl holds; a resume with nothing to train adds no file.
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
run_np 1 train -o Data.train_path=data.h5 -o Data.val_fraction=0.1 -o Global.device=cpu \
  -o Model.hidden_size=32 -o Model.num_layers=2 -o Model.max_seq_len=32 -o Engine.max_steps=6 \
  -o Engine.logging_freq=2 -o Engine.eval_freq=3 -o Engine.save_steps=0 -o Engine.output_dir=run \
  > run.log 2>&1 || { cat run.log; fail "training failed"; }
export PYTHONPATH="$SRC/tests/integration"
python3 - run/tensorboard run/metrics.jsonl <<'PY'
import json, math, sys
from tfevents import events_of, files_of, scalars_of, session_start

files = files_of(sys.argv[1])
assert len(files) == 1, files
events = events_of(files[0])
assert 3 in events[0] and session_start(events[1]) and events[1].get(2) == 1, events[:2]
scalars = [(e.get(2, 0), scalars_of(e)) for e in events[2:]]
records = [json.loads(l) for l in open(sys.argv[2])]
assert len(records) == len(scalars), (len(records), len(scalars))
checked = 0
for record, (step, values) in zip(records, scalars):
    assert record["step"] == step, (record, step)
    for key, value in record.items():
        if key == "step" or value is None: continue
        got = values[key]
        assert math.isclose(got, value, rel_tol=1e-6, abs_tol=1e-30), (key, got, value)
        checked += 1
print("%d events, %d scalars equal to metrics.jsonl (loss, val_loss, lr, ...)" % (len(scalars), checked))
PY

source "$TESTS_DIR/checkpoint_lib.sh"
KILLED=(-o Data.train_path=data.h5 -o Data.val_fraction=0 -o Global.device=cpu
        -o Model.hidden_size=32 -o Model.num_layers=2 -o Model.max_seq_len=32
        -o Engine.logging_freq=1 -o Engine.eval_freq=0 -o Engine.save_steps=10
        -o Engine.output_dir=killed)
"$TRAINER" train "${KILLED[@]}" -o Engine.max_steps=100000 > killed.log 2>&1 &
pid=$!
# Killed once a checkpoint is committed and 15 steps are logged.
await $pid killed.log \
  '[ -f killed/checkpoints/latest ] && [ "$(step_losses killed/metrics.jsonl 2> /dev/null | wc -l)" -ge 15 ]'
kill -9 $pid
wait $pid || true
saved=$(latest_step killed/checkpoints)
logged=$(step_losses killed/metrics.jsonl | tail -n 1 | cut -d' ' -f1)
[ "${saved:-0}" -ge 10 ] || fail "no checkpoint committed before the kill"
[ "${logged:-0}" -gt "$saved" ] || fail "nothing logged past the checkpoint (step $saved)"
run_np 1 train "${KILLED[@]}" -o Engine.max_steps=$((logged + 5)) --resume auto > resumed.log 2>&1 ||
  { cat resumed.log; fail "the resumed run failed"; }
python3 - killed/tensorboard killed/metrics.jsonl $((logged + 5)) <<'PY'
import json, math, sys
from tfevents import events_of, files_of, scalars_of, session_start

records = [json.loads(l) for l in open(sys.argv[2])]
loss_steps = [r["step"] for r in records if "loss" in r]
assert loss_steps == list(range(1, int(sys.argv[3]) + 1)), loss_steps
# TensorBoard's reading: events in file order; the first START begins the session, each later
# START at step S drops the kept ones at >= S.
kept, starts = [], 0
for path in files_of(sys.argv[1]):
    for e in events_of(path):
        if 3 in e:  # file_version: a run's first event (two runs in one second share a file)
            continue
        if session_start(e):
            starts += 1
            if starts > 1:
                kept = [k for k in kept if k[0] < e.get(2, 0)]
        else:
            kept.append((e.get(2, 0), scalars_of(e)))
assert starts == 2, starts  # the killed run's and the resumed run's
def merged(pairs):
    out = {}
    for step, values in pairs:
        for key, value in values.items():
            if not isinstance(value, (int, float)) or value != value: continue  # null, NaN
            assert (step, key) not in out, ("twice", step, key)
            out[(step, key)] = value
    return out
got = merged(kept)
want = merged((r["step"], {k: v for k, v in r.items() if k != "step"}) for r in records)
assert got.keys() == want.keys(), sorted(set(got) ^ set(want))
for key, value in want.items():
    assert math.isclose(got[key], value, rel_tol=1e-6, abs_tol=1e-30), (key, got[key], value)
print("resumed: %d losses, each step once; %d scalars after TensorBoard's purge equal metrics.jsonl"
      % (len(loss_steps), len(got)))
PY
grep -q "record(s) after step $saved (logged past this checkpoint) or of a run that went back and committed no checkpoint, moved to .*metrics.jsonl.superseded" resumed.log || { cat resumed.log; fail "no line about the moved records"; }
[ -s killed/metrics.jsonl.superseded ] || fail "the moved records are not in metrics.jsonl.superseded"
echo "ok: killed at step $logged, resumed from step $saved: no step logged twice"
# A resume with nothing to train (a finished job requeued) adds no event file.
files=$(ls killed/tensorboard | wc -l)
sleep 1  # another second: another file name, were one made
run_np 1 train "${KILLED[@]}" -o Engine.max_steps=$((logged + 5)) --resume auto > again.log 2>&1 ||
  { cat again.log; fail "the run with nothing to do failed"; }
grep -q "nothing to do" again.log || { cat again.log; fail "no 'nothing to do'"; }
[ "$(ls killed/tensorboard | wc -l)" -eq "$files" ] || fail "a run with nothing to train made an event file"
echo "ok: a requeued finished run adds no event file"
