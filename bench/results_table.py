#!/usr/bin/env python3
"""The results table of docs/performance.md, from the measurement records (bench/results/*.jsonl).

  results_table.py [FILE...] [--all | --compact] [--update DOC | --check DOC]

FILE: records, one JSON object a line, oldest first (default: bench/results/gpu.jsonl).
Prints a markdown table with one row per model, hardware and layout (and PyTorch script, where a
path outside bench/ names it: "PyTorch (../shared/bench/torch_llama.py)"): the latest record of
each (the last in the file), then, per row, the range of the ratio over every record of the same
commit. --all prints every record instead, oldest first; --compact the latest with fewer columns
(README.md's). --update DOC writes the table between the lines "<!-- results_table.py: begin -->"
and "<!-- results_table.py: end -->" of DOC, the compact one after a begin line
"<!-- results_table.py --compact: begin -->"; --check DOC exits 1 when a marked part of DOC is
not what this script prints. Python's standard library only.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "bench", "results", "gpu.jsonl")
BEGIN, END = "<!-- results_table.py: begin -->", "<!-- results_table.py: end -->"
BEGIN_COMPACT = "<!-- results_table.py --compact: begin -->"
REQUIRED = ("date", "hardware", "model", "layout", "micro_batch", "tokens_per_s", "peer", "ratio")
MODEL_ORDER = ["GPT-2 124M", "GPT-2 350M", "GPT 1.3B"]


def load(paths):
    records = []
    for path in paths:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                missing = [k for k in REQUIRED if k not in rec]
                if missing:
                    sys.exit("%s:%d: a record without %s" % (path, number, ", ".join(missing)))
                records.append(rec)
    return records


def peer_script(peer):
    """The PyTorch script of a peer named "PyTorch (DIR/SCRIPT)" by a path outside bench/ (such as
    ../shared/bench/torch_llama.py); "" for bench/'s scripts and bare names."""
    name = peer.get("name", "")
    if name.startswith("PyTorch (") and name.endswith(")"):
        script = name[len("PyTorch ("):-1]
        if "/" in script and not script.startswith("bench/"):
            return script
    return ""


def key(rec):
    """A row: model, GPUs and layout; against a PyTorch script from outside bench/, a row of its
    own."""
    return rec["model"], rec["hardware"], rec["layout"], peer_script(rec["peer"])


def number(x):
    return "{:,}".format(x) if x is not None else "-"


def against(peer):
    name = peer.get("name", "")
    if name.startswith("PyTorch"):
        script = peer_script(peer)
        return "PyTorch%s, B=%s" % (" (%s)" % script if script else "", peer["micro_batch"])
    return name.replace("the trainer on ", "")


def latest_memory(records, rec):
    """(GiB, True) from the record, else from the latest record of the same shape that has it."""
    if rec.get("memory_gib") is not None:
        return rec["memory_gib"], True
    for other in reversed(records):
        if key(other) == key(rec) and other["micro_batch"] == rec["micro_batch"] \
                and other.get("memory_gib") is not None:
            return other["memory_gib"], False
    return None, True


def row(records, rec):
    memory, own = latest_memory(records, rec)
    mem = "-" if memory is None else "%.1f GiB%s" % (memory, "" if own else "*")
    mfu = "-" if rec.get("mfu") is None else "%.1f%%" % (100 * rec["mfu"])
    return "| %s | %s | %s | %s | %s | %s | %s | %s | %s | **%.3f** | %s | %s |" % (
        rec["model"], rec["hardware"], rec["layout"], rec["micro_batch"],
        number(rec["tokens_per_s"]), mfu, mem, against(rec["peer"]),
        number(rec["peer"].get("tokens_per_s")), rec["ratio"], rec.get("commit") or "-",
        rec["date"])


def compact_row(rec):
    mfu = "-" if rec.get("mfu") is None else "%.1f%%" % (100 * rec["mfu"])
    return "| %s | %s | %s | %s | %s | %s | **%.3f**x %s |" % (
        rec["model"], rec["hardware"], rec["layout"], rec["micro_batch"],
        number(rec["tokens_per_s"]), mfu, rec["ratio"], against(rec["peer"]))


HEADER_COMPACT = ["| model | GPUs | layout | micro-batch | tokens/s | MFU | against |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
HEADER = ["| model | GPUs | layout | micro-batch | tokens/s | MFU | memory | against | its tokens/s"
          " | ratio | commit | date |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]


def table(records, every=False, compact=False):
    lines = list(HEADER_COMPACT if compact else HEADER)
    if every:
        return "\n".join(lines + [row(records, r) for r in records]) + "\n"
    latest = {}
    for rec in records:
        latest[key(rec)] = rec

    def order(rec):
        gpus = int(rec["hardware"].split("x", 1)[0]) if rec["hardware"][0].isdigit() else 0
        model = MODEL_ORDER.index(rec["model"]) if rec["model"] in MODEL_ORDER else len(MODEL_ORDER)
        return gpus, rec["hardware"], rec["layout"] != "1 GPU", rec["layout"], model, rec["model"]

    rows = sorted(latest.values(), key=order)
    if compact:
        return "\n".join(lines + [compact_row(r) for r in rows]) + "\n"
    lines += [row(records, r) for r in rows]
    notes = []
    if any(latest_memory(records, r)[1] is False for r in rows):
        notes.append("\\* memory from the latest earlier record of the same model, layout and "
                     "micro-batch.")
    spread = []
    for r in rows:
        same = [o["ratio"] for o in records if key(o) == key(r) and r.get("commit")
                and o.get("commit") == r["commit"]]
        if len(same) > 1:
            spread.append("%s, %s: %.3f-%.3f (%d records)" % (
                r["model"], r["layout"], min(same), max(same), len(same)))
    if spread:
        notes.append("The ratio over every record of the same commit: " + "; ".join(spread) + ".")
    return "\n".join(lines) + "\n" + "".join("\n" + n + "\n" for n in notes)


def blocks(doc_text, tables):
    """DOC's text with each marked part replaced by its table (None without any markers)."""
    out, found, pos = [], False, 0
    while True:
        starts = [(doc_text.find(b, pos), b) for b in (BEGIN, BEGIN_COMPACT)]
        starts = [(i, b) for i, b in starts if i >= 0]
        if not starts:
            break
        start, begin = min(starts)
        end = doc_text.find(END, start)
        if end < 0:
            return None
        out.append(doc_text[pos:start] + begin + "\n" + tables[begin])
        pos, found = end, True
    return "".join(out) + doc_text[pos:] if found else None


def main(argv):
    paths, every, compact, update, check = [], False, False, None, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--all":
            every = True
        elif a == "--compact":
            compact = True
        elif a in ("--update", "--check") and args:
            update, check = (args.pop(0), check) if a == "--update" else (update, args.pop(0))
        elif a.startswith("-"):
            sys.exit(__doc__)
        else:
            paths.append(a)
    records = load(paths or [DEFAULT])
    doc = update or check
    if not doc:
        sys.stdout.write(table(records, every, compact))
        return
    with open(doc) as f:
        old = f.read()
    new = blocks(old, {BEGIN: table(records), BEGIN_COMPACT: table(records, compact=True)})
    if new is None:
        sys.exit("%s: no '%s' ... '%s' lines" % (doc, BEGIN, END))
    if check:
        if new != old:
            sys.exit("%s: its results table is not what bench/results_table.py prints; "
                     "run bench/results_table.py --update %s" % (doc, doc))
        return
    with open(doc, "w") as f:
        f.write(new)


if __name__ == "__main__":
    main(sys.argv[1:])
