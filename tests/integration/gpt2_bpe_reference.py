#!/usr/bin/env python3
"""The tests' independent GPT-2 byte-level BPE, in Python with the `regex` module (the engine of
GPT-2's own encoder), written from the algorithm GPT-2's encoder.py publishes:

  train DIR MERGES FILE...   learn MERGES merges from the files; write DIR/vocab.json (JSON with
                             \\u escapes, as OpenAI's encoder.json) and DIR/merges.txt
  encode DIR FILE...         one line per file: its token ids, space-separated
  decode DIR                 token ids on stdin -> their bytes on stdout (the end-of-text id as
                             two newlines, as `trainer sample` prints it)
"""
import json
import sys
from collections import Counter

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
END_OF_TEXT = "<|endoftext|>"


def byte_characters():
    """GPT-2's printable stand-in character for each byte."""
    kept = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) +
            list(range(0xAE, 0xFF + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in kept:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHARS = byte_characters()
CHAR_BYTES = {c: b for b, c in BYTE_CHARS.items()}


def spelled(text):
    return ["".join(BYTE_CHARS[b] for b in piece.encode("utf-8"))
            for piece in PATTERN.findall(text)]


def train(out_dir, merges, files):
    words = Counter()
    for path in files:
        words.update(spelled(open(path, encoding="utf-8").read()))
    symbols = {w: list(w) for w in words}
    learned = []
    for _ in range(merges):
        pairs = Counter()
        for w, count in words.items():
            s = symbols[w]
            for a, b in zip(s, s[1:]):
                pairs[a, b] += count
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))  # most frequent, ties by the pair itself
        learned.append(best)
        for w in words:
            s, merged, i = symbols[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    merged.append(s[i] + s[i + 1])
                    i += 2
                else:
                    merged.append(s[i])
                    i += 1
            symbols[w] = merged
    vocab = {BYTE_CHARS[b]: i for i, b in enumerate(sorted(BYTE_CHARS, key=lambda b: BYTE_CHARS[b]))}
    for a, b in learned:
        vocab.setdefault(a + b, len(vocab))
    vocab[END_OF_TEXT] = len(vocab)
    with open(f"{out_dir}/vocab.json", "w") as f:
        json.dump(vocab, f)
    with open(f"{out_dir}/merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in learned))


def load(directory):
    vocab = json.load(open(f"{directory}/vocab.json"))
    lines = open(f"{directory}/merges.txt", encoding="utf-8").read().split("\n")
    merges = [tuple(line.split()) for line in lines[1:] if line]
    return vocab, dict(zip(merges, range(len(merges))))


def bpe(token, ranks):
    word = tuple(token)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        first, second = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if (first, second) not in ranks:
            break
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and word[i] == first and word[i + 1] == second:
                merged.append(first + second)
                i += 2
            else:
                merged.append(word[i])
                i += 1
        word = tuple(merged)
    return word


def encode(directory, files):
    """<|endoftext|> in the text is that token, the text on either side encoded apart (as
    transformers' tokenizer does with its special tokens)."""
    vocab, ranks = load(directory)
    for path in files:
        ids = []
        for i, text in enumerate(open(path, encoding="utf-8", newline="").read().split(END_OF_TEXT)):
            if i > 0:
                ids.append(vocab[END_OF_TEXT])
            ids += [vocab[t] for piece in spelled(text) for t in bpe(piece, ranks)]
        print(" ".join(map(str, ids)))


def decode(directory):
    vocab, _ = load(directory)
    by_id = {i: t for t, i in vocab.items()}
    out = bytearray()
    for i in map(int, sys.stdin.read().split()):
        token = by_id[i]
        out += b"\n\n" if token == END_OF_TEXT else bytes(CHAR_BYTES[c] for c in token)
    sys.stdout.buffer.write(bytes(out))


if __name__ == "__main__":
    command, directory = sys.argv[1], sys.argv[2]
    if command == "train":
        train(directory, int(sys.argv[3]), sys.argv[4:])
    elif command == "encode":
        encode(directory, sys.argv[3:])
    else:
        decode(directory)
