"""TensorBoard event files read back independently of the trainer (Python stdlib only): TFRecord
framing with masked CRC-32C, the Event, Summary and SessionLog protobuf fields decoded by hand.
Used by tensorboard.sh."""
import glob
import struct


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
        b = buf[i]
        i += 1
        value |= (b & 0x7f) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value = struct.unpack("<d", buf[i:i + 8])[0]
            i += 8
        elif wire == 5:
            value = struct.unpack("<f", buf[i:i + 4])[0]
            i += 4
        elif wire == 2:
            n, i = varint(buf, i)
            value = buf[i:i + n]
            i += n
        else:
            raise SystemExit("unknown wire type %d" % wire)
        yield field, value


def events_of(path):
    """The events of one file, each a dict of Event fields (2 step, 3 file_version, 5 summary,
    7 session_log), with CRCs checked."""
    data = open(path, "rb").read()
    events, i = [], 0
    while i < len(data):
        length = struct.unpack("<Q", data[i:i + 8])[0]
        assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(data[i:i + 8]), "length CRC"
        body = data[i + 12:i + 12 + length]
        assert struct.unpack("<I", data[i + 12 + length:i + 16 + length])[0] == masked(body), "data CRC"
        events.append(dict(fields(body)))
        i += 16 + length
    assert events[0][3] == b"brain.Event:2", events[0]
    return events


def files_of(folder):
    return sorted(glob.glob(folder + "/events.out.tfevents.*"))


def scalars_of(event):
    values = {}
    for f, v in fields(event[5]):
        assert f == 1
        value = dict(fields(v))
        values[value[1].decode()] = value[2]
    return values


def session_start(event):
    """Whether the event is a SessionLog with status START (1)."""
    return 7 in event and dict(fields(event[7])).get(1) == 1
