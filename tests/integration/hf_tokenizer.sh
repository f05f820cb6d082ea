#!/usr/bin/env bash
# trainer pack --tokenizer hf against Hugging Face `tokenizers` (PyPI, in the venv of hf_venv.sh):
# the reference (hf_tokenizer.py) trains four small byte-level BPE tokenizers on the repository's
# docs with Qwen2's settings (its Split pattern, NFC, merges with no ignore_merges), Llama-3's
# (its pattern, ignore_merges, <|begin_of_text|> from the post-processor), SmolLM2's (Digits
# one by one, then GPT-2's pattern) and one with runs of digits, each with special tokens
# in and outside the BPE vocabulary, non-special added tokens, and added tokens with each of the
# flags lstrip, rstrip, single_word and normalized (true and false), and saves their tokenizer.json.
# The packed ids of a text of many scripts, emoji, whitespace runs, newlines, decomposed accents,
# special tokens and flagged ones, of English prose, and of 5,000 short documents of added tokens
# among spaces, letters and marks, must be the reference's ids, each document followed by the
# end-of-document token. Chat data (--input-format chat) with spaces of many kinds at the ends of
# its contents packs as the reference renders it: llama3 trims them as Llama 3's template does,
# chatml keeps them. The same for a SentencePiece model (BPE with byte fallback, as Llama-2's)
# that the `sentencepiece` package trains. Skipped (77) when the venv cannot be made.
source "$(dirname "$0")/lib.sh"
PY=$(bash "$SRC/tests/integration/hf_venv.sh") || exit $?
"$PY" -c "import tokenizers" 2>/dev/null || "$PY" -m pip install -q tokenizers >&2 ||
  { echo "skip: no tokenizers package" >&2; exit 77; }
REFERENCE="$SRC/tests/integration/hf_tokenizer.py"

CORPUS=/usr/share/common-licenses/GPL-3
[ -f "$SRC/../shared/data/tinyshakespeare.txt" ] && CORPUS="$SRC/../shared/data/tinyshakespeare.txt"
[ -f "$CORPUS" ] || CORPUS="$SRC/README.md"
head -c 100000 "$CORPUS" | iconv -f utf-8 -t utf-8 -c > english.txt
cat > world.txt <<'TEXT'
Ça va? Naïve café, déjà-vu — “quotes” and ‘single’ ones. Cafe vs café.
日本語のテキスト、漢字とカタカナ。中文也可以。한국어 텍스트.
Привет, мир! Ελληνικά 123 ٣٤٥ ²³ Ⅻ ½ 1234567 12,345.678
emoji 👋🏽🎉 and a joined one 👩‍💻!! 🇫🇷
I'm, you're, they've, we'll, she'd, it's, don't, DON'T, ''re I'M
tabs	and		tabs, no-break space, ideographic　space
  leading spaces and trailing   
x=1+2*3; y = f(x) // 3.14159 and 1,000,000
<|im_start|>user
hi<|im_end|><|endoftext|>one document<|endoftext|>and <|begin_of_text|>next<|eot_id|>
<think>thinking</think> <|fim_prefix|><|reserved_special_token_0|>x <|endoftext


after two blank lines     
    
end
TEXT
printf 'CRLF line\r\nanother\r\n\r\n  \r\n' >> world.txt
printf 'decomposed: cafe\xcc\x81 A\xcc\x8angstro\xcc\x88m\n' >> world.txt  # NFC composes them
"$PY" "$REFERENCE" flags_text world.txt  # where the added tokens' flags change the ids
"$PY" "$REFERENCE" mixed mixed.jsonl 5000 7  # short documents of added tokens, spaces and marks
cat "$SRC"/docs/*.md > corpus.txt
cat world.txt >> corpus.txt
# Paragraphs: the merge of two newlines (Qwen's "ĊĊ"), which joins a chat header's newline and
# a content's leading one in the whole text.
for i in $(seq 1 400); do printf 'word\n\nline\n\n\n'; done >> corpus.txt

# same_ids PACK EXPECTED EOD NAME: PACK's /tokens are EXPECTED's ids (a line per document), each
# line followed by EOD.
same_ids() {
  h5dump -d /tokens -b LE -o "$1.bin" "$1" > /dev/null
  "$PY" - "$1.bin" "$2" "$3" "$4" <<'PY' || fail "$4: the packed ids are not the reference's"
import array, sys
packed, expected, eod, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
got = array.array("H", open(packed, "rb").read()).tolist()
want = []
for line in open(expected).read().splitlines():
    want += [int(t) for t in line.split()] + [eod]
assert len(got) == len(want), f"{len(got)} tokens packed, the reference has {len(want)}"
bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
assert not bad, f"{len(bad)} tokens differ, the first at {bad[0]}: {got[bad[0]-3:bad[0]+4]} vs {want[bad[0]-3:bad[0]+4]}"
print(f"{name}: {len(got)} tokens as tokenizers encodes them")
PY
}

for kind in qwen2 llama3 smollm2 digitruns; do
  "$PY" "$REFERENCE" train "$kind" "$kind" 1500 corpus.txt || fail "training the $kind tokenizer failed"
  "$TRAINER" pack --tokenizer hf --tokenizer-dir "$kind" --input english.txt world.txt \
    --output "$kind.h5" --quiet || fail "trainer pack --tokenizer hf ($kind) failed"
  "$PY" "$REFERENCE" encode "$kind" english.txt world.txt > "$kind.expected"
  eod=$("$PY" "$REFERENCE" eod "$kind")
  same_ids "$kind.h5" "$kind.expected" "$eod" "$kind"
  "$TRAINER" pack --tokenizer hf --tokenizer-dir "$kind" --input-format jsonl --input mixed.jsonl \
    --output "mixed-$kind.h5" --quiet || fail "trainer pack --tokenizer hf ($kind, mixed) failed"
  "$PY" "$REFERENCE" encode_jsonl "$kind" mixed.jsonl > "mixed-$kind.expected"
  same_ids "mixed-$kind.h5" "mixed-$kind.expected" "$eod" "$kind, mixed documents"
done
h5dump -a tokenizer qwen2.h5 | grep -q '"hf"' || fail "the tokenizer attribute is not hf"
# Chat data: chatml's markers are single tokens of the Qwen2-style tokenizer, so it packs; the
# Llama-3-style one has neither chatml's nor llama3's headers (<|start_header_id|>): refused, not
# trained as ordinary text.
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n' > chat.jsonl
"$TRAINER" pack --input-format chat --tokenizer hf --tokenizer-dir qwen2 --input chat.jsonl \
  --output chat-qwen2.h5 --quiet || fail "chat with the qwen2 tokenizer and chatml failed"
expect_error 2 "chat-template chatml (pack): the tokenizer has no token <|im_start|> (it splits into" \
  "$TRAINER" pack --input-format chat --tokenizer hf --tokenizer-dir llama3 --input chat.jsonl --output c.h5
expect_error 2 "chat-template llama3 (pack): the tokenizer has no token <|start_header_id|>" \
  "$TRAINER" pack --input-format chat --chat-template llama3 --tokenizer hf --tokenizer-dir llama3 \
  --input chat.jsonl --output c.h5
# llama3 trims each content as Llama 3's template does (Jinja's trim, Python's str.strip: ASCII and
# Unicode whitespace at both ends, none inside, nor the zero-width characters that are not
# whitespace); chatml (Qwen's template) keeps it as it is. The reference renders the whole
# conversation in Python and encodes it with tokenizers.
"$PY" "$REFERENCE" with_specials llama3 llama3-chat "<|start_header_id|>" "<|end_header_id|>" ||
  fail "adding Llama 3's header tokens"
"$PY" - <<'PY'
import json
spaces = [" \t", "\u00a0\u3000", "\u2028\u2029\x85", "\x1c\x1d\x1e\x1f\x0b\x0c",
          "\u1680\u2000\u200a\u202f\u205f"]
contents = [s + "word " + s + "and more" + s[::-1] + "\r\n" for s in spaces]
contents += ["\u200bzero width\ufeff", " \u3000", "", " x\n\n"]
with open("trim.jsonl", "w") as f:
    for i in range(0, len(contents), 2):
        messages = [{"role": "user", "content": contents[i]}]
        if i + 1 < len(contents):
            messages.append({"role": "assistant", "content": contents[i + 1]})
        f.write(json.dumps({"messages": messages}) + "\n")
# Contents led by newlines and indents: in a prompt the header's newline joins them, as in the
# whole text; a trained reply is encoded apart from its header. OpenAI's weight 0 and ms-swift's
# loss false make a reply part of the prompt; --system adds a system message where none leads.
lead = [[{"role": "user", "content": "\nleading newline"},
         {"role": "assistant", "content": "\n    return x + 1\n"}],
        [{"role": "system", "content": "\n\n  be brief"},
         {"role": "user", "content": "  \n\n indented"},
         {"role": "assistant", "content": "\n\nnot trained", "weight": 0},
         {"role": "user", "content": "\n again"},
         {"role": "assistant", "content": "\n\n    no loss", "loss": False},
         {"role": "assistant", "content": "  trained\n"}]]
with open("trim.jsonl", "a") as f:
    for messages in lead:
        f.write(json.dumps({"messages": messages}) + "\n")
PY
for template in llama3 chatml; do
  [ "$template" = llama3 ] && dir=llama3-chat || dir=qwen2
  eod=$("$PY" "$REFERENCE" eod $dir)
  "$TRAINER" pack --input-format chat --chat-template $template --tokenizer hf \
    --tokenizer-dir $dir --input trim.jsonl --output trim-$template.h5 --quiet ||
    fail "chat pack with $template failed"
  "$PY" "$REFERENCE" chat $dir $template trim.jsonl > trim-$template.expected
  same_ids trim-$template.h5 trim-$template.expected "$eod" "chat contents under $template"
  "$TRAINER" pack --input-format chat --chat-template $template --tokenizer hf --tokenizer-dir $dir \
    --system $'You are Qwen.\n' --input trim.jsonl --output system-$template.h5 --quiet ||
    fail "chat pack with --system failed"
  "$PY" "$REFERENCE" chat $dir $template trim.jsonl $'You are Qwen.\n' > system-$template.expected
  same_ids system-$template.h5 system-$template.expected "$eod" "--system under $template"
done
# Without --chat-template, a tokenizer with Llama 3's header markers and not chatml's: llama3.
"$TRAINER" pack --input-format chat --tokenizer hf --tokenizer-dir llama3-chat --input trim.jsonl \
  --output trim-default.h5 --quiet || fail "chat pack with the default template failed"
same_ids trim-default.h5 trim-llama3.expected "$("$PY" "$REFERENCE" eod llama3-chat)" \
  "the default template of a Llama 3 tokenizer"
# A document longer than pack's 4 MiB reads: the streaming's hold-back across them.
# Long runs of one class too (pieces of 100,000 spaces, letters, newlines).
for i in $(seq 45); do cat english.txt world.txt; done > long.txt
"$PY" -c "import sys; sys.stdout.write(' ' * 100000 + 'x' + 'a' * 100000 + ' 1' * 1000 + '\n' * 100000)" >> long.txt
cat world.txt >> long.txt
"$TRAINER" pack --tokenizer hf --tokenizer-dir qwen2 --input long.txt --output long.h5 --quiet
h5dump -d /tokens -b LE -o long.bin long.h5 > /dev/null
"$PY" "$REFERENCE" bench qwen2 long.txt long.bin || fail "the long document's ids are not the reference's"

# SentencePiece (Llama-2 style: BPE with byte fallback) against the `sentencepiece` package; the
# folder read with --tokenizer sentencepiece, and with --tokenizer hf (no tokenizer.json there).
if "$PY" -c "import sentencepiece" 2>/dev/null || "$PY" -m pip install -q sentencepiece >&2; then
  mkdir sp
  "$PY" "$REFERENCE" sp_train sp 1000 corpus.txt || fail "training the SentencePiece model failed"
  "$PY" "$REFERENCE" sp_encode sp english.txt world.txt > sp.expected
  for tokenizer in sentencepiece hf; do
    "$TRAINER" pack --tokenizer $tokenizer --tokenizer-dir sp --input english.txt world.txt \
      --output sp.h5 --force --quiet || fail "trainer pack --tokenizer $tokenizer (SentencePiece) failed"
    h5dump -d /tokens -b LE -o sp.bin sp.h5 > /dev/null
    "$PY" - <<'PY' || fail "SentencePiece ($tokenizer): the packed ids are not the reference's"
import array
got = array.array("H", open("sp.bin", "rb").read()).tolist()
want = []
for line in open("sp.expected").read().splitlines():
    want += [int(t) for t in line.split()] + [2]  # </s>
assert len(got) == len(want), f"{len(got)} tokens packed, the reference has {len(want)}"
bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
assert not bad, f"{len(bad)} differ, the first at {bad[0]}: {got[bad[0]-3:bad[0]+4]} vs {want[bad[0]-3:bad[0]+4]}"
print(f"sentencepiece: {len(got)} tokens as the sentencepiece package encodes them")
PY
  done
  h5dump -a tokenizer sp.h5 | grep -q '"sentencepiece"' || fail "the tokenizer attribute is not sentencepiece"
  # Chat data through SentencePiece would give each template piece its own dummy prefix: refused.
  for tokenizer in sentencepiece hf; do
    expect_error 2 "a chat template with a SentencePiece tokenizer (pack)" "$TRAINER" pack \
      --input-format chat --chat-template none --tokenizer $tokenizer --tokenizer-dir sp \
      --input chat.jsonl --output c.h5
  done
else
  SENTENCEPIECE_MISSING=1  # the rest still runs; the test then reports a skip, not a pass
fi
# trainer sample with the model's own tokenizer.json: a tiny llama trained on one repeated
# sentence, packed with the Qwen2-style tokenizer, continues a prompt with that sentence (greedy),
# the prompt encoded and each token printed as its text through --tokenizer-dir.
SENTENCE="the cat sat on the mat. "
python3 -c "import sys; open('cat.txt', 'w').write(sys.argv[1] * 600)" "$SENTENCE"
"$TRAINER" pack --tokenizer hf --tokenizer-dir qwen2 --input cat.txt --output cat.h5 --quiet ||
  fail "packing the sentence"
VOCAB=$(h5dump -a vocab_size cat.h5 | grep -o '(0): [0-9]*' | grep -o '[0-9]*$')
"$TRAINER" train -c "$SRC/configs/tiny-llama-cpu.yaml" -o Data.train_path=cat.h5 \
  -o Data.val_fraction=0 -o Model.vocab_size="$VOCAB" -o Model.num_layers=2 -o Model.max_seq_len=32 \
  -o Engine.max_steps=120 -o Engine.save_steps=120 -o Engine.eval_freq=0 -o Engine.logging_freq=40 \
  -o Engine.output_dir=cat-run > cat-train.log 2>&1 || { tail -20 cat-train.log; fail "training on the sentence"; }
PROMPT="the cat sat on the"
"$TRAINER" sample cat-run/checkpoints --tokenizer-dir qwen2 --prompt "$PROMPT" -n 12 -t 0 \
  --output cat-sample.txt > /dev/null 2> cat-sample.err || { cat cat-sample.err; fail "trainer sample"; }
python3 - "$SENTENCE" "$PROMPT" <<'PY' || fail "the sample through tokenizer.json is not the sentence"
import sys
sentence, prompt = sys.argv[1], sys.argv[2]
got = open("cat-sample.txt").read().rstrip("\n")
want = (sentence * 20)
assert got.startswith(prompt) and want.startswith(got) and len(got) > len(prompt) + 20, repr(got)
print(f"sample through tokenizer.json: {got!r}")
PY
# Another model's tokenizer.json (more ids than the model's vocabulary, 257 bytes here) is
# refused, not used to print ids as the wrong text.
"$TRAINER" pack --input cat.txt --output cat-bytes.h5 --quiet || fail "packing bytes"
"$TRAINER" train -c "$SRC/configs/tiny-cpu.yaml" -o Data.train_path=cat-bytes.h5 -o Data.val_fraction=0 \
  -o Model.num_layers=1 -o Model.max_seq_len=32 -o Engine.max_steps=1 -o Engine.save_steps=1 \
  -o Engine.eval_freq=0 -o Engine.output_dir=bytes-run > bytes-train.log 2>&1 ||
  { tail bytes-train.log; fail "training on bytes"; }
expect_error 2 "the tokenizer in qwen2 (--tokenizer-dir) has [0-9]* tokens, more than the model's vocabulary of 257" \
  "$TRAINER" sample bytes-run/checkpoints --tokenizer-dir qwen2 --prompt "the cat" -n 2
# trainer sample --chat: a tiny llama trained on one chatml conversation, repeated, answers its
# question with the reply it learned, printed without the template's markers: the prompt rendered
# as pack renders the data, then "<|im_start|>assistant\n", and the reply cut at <|im_end|> (a
# wrong header or a missed end marker would print the template's text).
REPLY="the cat sat on the mat."
python3 - "$REPLY" <<'PY'
import json, sys
line = json.dumps({"messages": [{"role": "user", "content": "where is the cat?"},
                                {"role": "assistant", "content": sys.argv[1]}]})
open("cat-chat.jsonl", "w").write((line + "\n") * 400)
PY
"$TRAINER" pack --input-format chat --tokenizer hf --tokenizer-dir qwen2 --input cat-chat.jsonl \
  --output cat-chat.h5 --quiet || fail "packing the conversation"
"$TRAINER" train -c "$SRC/configs/tiny-llama-cpu.yaml" -o Data.train_path=cat-chat.h5 \
  -o Data.val_fraction=0 -o Model.vocab_size="$VOCAB" -o Model.num_layers=2 -o Model.max_seq_len=32 \
  -o Engine.max_steps=120 -o Engine.save_steps=120 -o Engine.eval_freq=0 -o Engine.logging_freq=40 \
  -o Engine.output_dir=cat-chat-run > cat-chat-train.log 2>&1 ||
  { tail -20 cat-chat-train.log; fail "training on the conversation"; }
"$TRAINER" sample cat-chat-run/checkpoints --tokenizer-dir qwen2 --chat --prompt "where is the cat?" \
  -n 24 -t 0 > cat-chat.txt 2> cat-chat.err || { cat cat-chat.err; fail "trainer sample --chat"; }
[[ "$(cat cat-chat.txt)" == "$REPLY" ]] ||
  fail "sample --chat answered $(od -c cat-chat.txt | head -5), not '$REPLY'"
echo "sample --chat through tokenizer.json (chatml): '$(cat cat-chat.txt)'"
# export --tokenizer-dir with a tokenizer.json: transformers' tokenizer of the export gives
# the ids of tokenizers' own (added and special tokens included), not a tokenizer rebuilt from
# vocab.json and merges.txt alone.
"$TRAINER" export cat-chat-run/checkpoints --output cat-export --tokenizer-dir qwen2 > export.log 2>&1 ||
  { cat export.log; fail "export --tokenizer-dir qwen2"; }
"$PY" - <<'PY' || fail "the exported tokenizer does not encode as tokenizers does"
import transformers, tokenizers
text = "<|im_start|>user\nwhere is the cat?<|im_end|>\n<think> 12,345 caf\u00e9"
want = tokenizers.Tokenizer.from_file("qwen2/tokenizer.json").encode(text).ids
# AutoTokenizer takes the class the exported tokenizer_config.json names (PreTrainedTokenizerFast,
# added where the source named none), not the model type's (Qwen3, unknown to transformers 4.46).
got = transformers.AutoTokenizer.from_pretrained("cat-export")(text)["input_ids"]
assert got == want, (got, want)
print(f"export's tokenizer: {len(got)} ids as tokenizers gives them")
# generate() stops at the end of a reply as well as of a document.
tok = tokenizers.Tokenizer.from_file("qwen2/tokenizer.json")
eos = transformers.GenerationConfig.from_pretrained("cat-export").eos_token_id
assert eos == [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")], eos
print(f"export's generation_config.json: eos_token_id {eos}")
PY
# trainer sample through a SentencePiece tokenizer.model (Llama-2's layout): a tiny llama trained
# on the sentence packed with it continues the prompt with the sentence, as text.
if [ -z "${SENTENCEPIECE_MISSING:-}" ]; then
  "$TRAINER" pack --tokenizer sentencepiece --tokenizer-dir sp --input cat.txt --output cat-sp.h5 \
    --quiet || fail "packing the sentence with SentencePiece"
  "$TRAINER" train -c "$SRC/configs/tiny-llama-cpu.yaml" -o Data.train_path=cat-sp.h5 \
    -o Data.val_fraction=0 -o Model.vocab_size=1000 -o Model.num_layers=2 -o Model.max_seq_len=32 \
    -o Engine.max_steps=120 -o Engine.save_steps=120 -o Engine.eval_freq=0 -o Engine.logging_freq=40 \
    -o Engine.output_dir=cat-sp-run > cat-sp-train.log 2>&1 ||
    { tail -20 cat-sp-train.log; fail "training on the SentencePiece sentence"; }
  "$TRAINER" sample cat-sp-run/checkpoints --tokenizer-dir sp --prompt "$PROMPT" -n 12 -t 0 \
    --output cat-sp-sample.txt > /dev/null 2> cat-sp-sample.err ||
    { cat cat-sp-sample.err; fail "trainer sample through tokenizer.model"; }
  python3 - "$SENTENCE" "$PROMPT" <<'PY' || fail "the sample through tokenizer.model is not the sentence"
import sys
sentence, prompt = sys.argv[1], sys.argv[2]
got = open("cat-sp-sample.txt").read().rstrip("\n")
want = " " + sentence * 20  # the word marker of the first piece prints as a space
assert got.startswith(" " + prompt) and want.startswith(got) and len(got) > len(prompt) + 20, repr(got)
print(f"sample through tokenizer.model: {got!r}")
PY
fi
if [ -n "${SENTENCEPIECE_MISSING:-}" ]; then
  echo "skip: no sentencepiece package in the venv, so --tokenizer sentencepiece was not checked"
  exit 77
fi
echo "hf_tokenizer: OK"
