#!/usr/bin/env bash
# The TensorBoard event file holds what metrics.jsonl holds: read back by an independent decoder
# (TFRecord framing with masked CRC-32C, the Event/Summary protobuf fields by hand, Python stdlib).
source "$(dirname "$0")/lib.sh"
make_small_dataset data.h5
run_np 1 train -o Data.train_path=data.h5 -o Data.val_fraction=0.1 -o Global.device=cpu \
  -o Model.hidden_size=32 -o Model.num_layers=2 -o Model.max_seq_len=32 -o Engine.max_steps=6 \
  -o Engine.logging_freq=2 -o Engine.eval_freq=3 -o Engine.save_steps=0 -o Engine.output_dir=run \
  > run.log 2>&1 || { cat run.log; fail "training failed"; }
python3 - run/tensorboard run/metrics.jsonl <<'PY'
import glob, json, math, struct, sys

def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82f63b78 if crc & 1 else crc >> 1
    return crc ^ 0xffffffff

def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff

def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]; i += 1
        value |= (b & 0x7f) << shift; shift += 7
        if b < 0x80: return value, i

def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0: value, i = varint(buf, i)
        elif wire == 1: value = struct.unpack("<d", buf[i:i + 8])[0]; i += 8
        elif wire == 5: value = struct.unpack("<f", buf[i:i + 4])[0]; i += 4
        elif wire == 2:
            n, i = varint(buf, i); value = buf[i:i + n]; i += n
        else: raise SystemExit("unknown wire type %d" % wire)
        yield field, value

files = glob.glob(sys.argv[1] + "/events.out.tfevents.*")
assert len(files) == 1, files
data = open(files[0], "rb").read()
events, i = [], 0
while i < len(data):
    length = struct.unpack("<Q", data[i:i + 8])[0]
    assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(data[i:i + 8]), "length CRC"
    body = data[i + 12:i + 12 + length]
    assert struct.unpack("<I", data[i + 12 + length:i + 16 + length])[0] == masked(body), "data CRC"
    events.append(dict(fields(body)))
    i += 16 + length
assert events[0][3] == b"brain.Event:2", events[0]
scalars = []
for e in events[1:]:
    summary = e[5]
    values = {}
    for f, v in fields(summary):
        assert f == 1
        value = dict(fields(v))
        values[value[1].decode()] = value[2]
    scalars.append((e.get(2, 0), values))
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
