#!/usr/bin/env bash
# trainer pack --tokenizer gpt2 against an independent GPT-2 encoder (gpt2_bpe_reference.py:
# Python with the regex module, written from GPT-2's published algorithm). The reference learns a
# 300-merge byte-level vocabulary from English prose and a text of many scripts, writes it as
# GPT-2's files, and encodes both texts; the packed file must hold exactly those tokens, each
# document followed by <|endoftext|> (and <|endoftext|> in the text that token, as transformers
# reads it). A small model trained on the packed tokens then samples
# greedily twice: from a text prompt with --tokenizer-dir, and from the reference's ids of the same
# prompt; the reference's decoding of the second sample must be the first one's text. The same text
# as JSON Lines (--input-format jsonl) gives the reference's tokens of each line. trainer export
# --tokenizer-dir copies the two files. Bad input: one error line each (2 usage, 3 data).
source "$(dirname "$0")/lib.sh"
REFERENCE="$SRC/tests/integration/gpt2_bpe_reference.py"
PY=""
for candidate in python3 /usr/bin/python3; do
  if "$candidate" -c "import regex" 2> /dev/null; then PY=$candidate && break; fi
done
[ -n "$PY" ] || fail "no python3 with the regex module: install python3-regex (scripts/install_deps.sh --tests)"

CORPUS=/usr/share/common-licenses/GPL-3
[ -f "$SRC/../shared/data/tinyshakespeare.txt" ] && CORPUS="$SRC/../shared/data/tinyshakespeare.txt"
[ -f "$CORPUS" ] || CORPUS="$SRC/README.md"
head -c 120000 "$CORPUS" | iconv -f utf-8 -t utf-8 -c > english.txt
cat > world.txt <<'TEXT'
Ça va? Naïve café, déjà-vu — “quotes” and ‘single’ ones.
日本語のテキスト、漢字とカタカナ。中文也可以。
Привет, мир! Ελληνικά 123 ٣٤٥ ²³ Ⅻ ½
emoji 👋🏽🎉 and a joined one 👩‍💻!!
I'm, you're, they've, we'll, she'd, it's, don't, DON'T, ''re
tabs	and		tabs, no-break space, ideographic　space
  leading spaces and trailing   
x=1+2*3; y = f(x) // 3.14159 and 1,000,000
one document<|endoftext|>and the next, after a marker  <|endoftext|> with spaces<|endoftext|>


after two blank lines
TEXT
printf 'CRLF line\r\nanother\r\n' >> world.txt
mkdir vocab
"$PY" "$REFERENCE" train vocab 300 english.txt world.txt
VOCAB=$("$PY" -c "import json; print(len(json.load(open('vocab/vocab.json'))))")

"$TRAINER" pack --tokenizer gpt2 --tokenizer-dir vocab --input english.txt world.txt \
  --output data.h5 --quiet || fail "trainer pack --tokenizer gpt2 failed"
h5dump -d /tokens -b LE -o tokens.bin data.h5 > /dev/null
"$PY" "$REFERENCE" encode vocab english.txt world.txt > expected.txt
"$PY" - "$VOCAB" <<'PY'
import array, sys
vocab = int(sys.argv[1])
got = array.array("H", open("tokens.bin", "rb").read()).tolist()
want = []
for line in open("expected.txt").read().splitlines():
    want += [int(t) for t in line.split()] + [vocab - 1]  # <|endoftext|> is the last id
assert len(got) == len(want), f"{len(got)} tokens packed, the reference has {len(want)}"
bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
assert not bad, f"{len(bad)} tokens differ, the first at {bad[0]}: {got[bad[0]-3:bad[0]+4]} vs {want[bad[0]-3:bad[0]+4]}"
print(f"{len(got)} tokens ({vocab} in the vocabulary) as the reference encodes them")
PY
h5dump -a tokenizer data.h5 | grep -q '"gpt2"' || fail "the tokenizer attribute is not gpt2"

# JSON Lines: each paragraph of world.txt a line as Python's json writes it (\u escapes, surrogate
# pairs beyond U+FFFF, other keys around "text"); the tokens must be the reference's encoding of
# each paragraph, an eod after each.
mkdir paragraphs
"$PY" - <<'PY'
import json
paragraphs = [p for p in open("world.txt", encoding="utf-8", newline="").read().split("\n\n") if p]
with open("world.jsonl", "w") as out:
    for i, p in enumerate(paragraphs):
        out.write(json.dumps({"id": i, "meta": {"text": "not this", "tags": ["a", "}"]}, "text": p}) + "\n")
        open(f"paragraphs/{i:03d}.txt", "w", encoding="utf-8", newline="").write(p)
PY
"$TRAINER" pack --input-format jsonl --tokenizer gpt2 --tokenizer-dir vocab --input world.jsonl \
  --output jsonl.h5 --quiet || fail "trainer pack --input-format jsonl failed"
h5dump -d /tokens -b LE -o jsonl.bin jsonl.h5 > /dev/null
"$PY" "$REFERENCE" encode vocab paragraphs/*.txt > jsonl_expected.txt
"$PY" - "$VOCAB" <<'PY'
import array, sys
eod = int(sys.argv[1]) - 1
got = array.array("H", open("jsonl.bin", "rb").read()).tolist()
lines = open("jsonl_expected.txt").read().splitlines()
want = [t for line in lines for t in [int(x) for x in line.split()] + [eod]]
assert got == want, f"JSON Lines: {len(got)} tokens packed, the reference has {len(want)}"
print(f"JSON Lines: {len(got)} tokens of {len(lines)} lines as the reference encodes them")
PY

run_np 1 train -c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=data.h5 -o Data.val_fraction=0 \
  -o Model.vocab_size="$VOCAB" -o Model.num_layers=2 -o Model.hidden_size=64 \
  -o Model.max_seq_len=64 -o Engine.max_steps=40 -o Engine.save_steps=40 -o Engine.eval_freq=0 \
  -o Engine.logging_freq=20 -o Engine.output_dir=run > train.log 2>&1 ||
  { tail -20 train.log; fail "training on the BPE tokens failed"; }
printf 'ROMEO: I say, café' > prompt.txt
"$TRAINER" sample run/checkpoints --tokenizer-dir vocab --prompt "$(cat prompt.txt)" -n 30 -t 0 \
  --output text.txt 2> sample.err || { cat sample.err; fail "trainer sample --tokenizer-dir failed"; }
IDS=$("$PY" "$REFERENCE" encode vocab prompt.txt)
"$TRAINER" sample run/checkpoints --prompt-ids "$IDS" -n 30 -t 0 --output ids.txt 2> /dev/null
"$PY" "$REFERENCE" decode vocab < ids.txt > decoded.txt
printf '\n' >> decoded.txt  # sample ends its output with a newline
cmp -s text.txt decoded.txt || { cat text.txt decoded.txt; fail "sample's text differs from the reference's decoding of the same ids"; }
grep -q "^ROMEO: I say, café" text.txt || fail "the sample does not start with its prompt"

"$TRAINER" export run/checkpoints --output hf --tokenizer-dir vocab > /dev/null ||
  fail "trainer export --tokenizer-dir failed"
cmp -s hf/vocab.json vocab/vocab.json && cmp -s hf/merges.txt vocab/merges.txt ||
  fail "export did not copy the tokenizer files"

expect_error 2 "missing --tokenizer-dir" "$TRAINER" pack --tokenizer gpt2 --input english.txt --output x.h5
# An output that is also an input is refused even with --force, and the input is left whole.
cp english.txt self.txt
expect_error 2 "\-\-output self.txt is also an input" "$TRAINER" pack --input self.txt --output self.txt --force
expect_error 2 "\-\-val-output self.txt is also an input" "$TRAINER" pack --input self.txt \
  --output self.h5 --val-output self.txt --val-fraction 0.5 --force
cmp -s english.txt self.txt || fail "a refused pack changed its input"
expect_error 2 "no GPT-2 tokenizer files" "$TRAINER" pack --tokenizer gpt2 --tokenizer-dir run \
  --input english.txt --output x.h5
mkdir broken && cp vocab/vocab.json broken/ && printf '#version: 0.2\nq z\n' > broken/merges.txt
expect_error 3 "merge not in the vocabulary" "$TRAINER" pack --tokenizer gpt2 --tokenizer-dir broken \
  --input english.txt --output x.h5
[ ! -e x.h5 ] || fail "a failed pack left x.h5"
mkdir larger && cp vocab/merges.txt larger/ &&
  "$PY" -c "import json; v = json.load(open('vocab/vocab.json')); v['<|pad|>'] = len(v); json.dump(v, open('larger/vocab.json', 'w'))"
expect_error 2 "more than the model's vocabulary" "$TRAINER" sample run/checkpoints --tokenizer-dir larger
expect_error 2 "or with --tokenizer-dir" "$TRAINER" sample run/checkpoints --prompt "text"
echo "bpe_pack: all checks passed"
