"""The reference for hf_tokenizer.sh: Hugging Face `tokenizers` (PyPI) trains small byte-level BPE
tokenizers with Qwen2's and Llama-3's settings and encodes text with them.
  flags_text FILE                        appends text where the added tokens' flags matter
  mixed FILE N SEED                      N short documents (JSON Lines) of random runs of the
                                         added tokens, spaces, letters, marks and digits: each
                                         ends where the streaming holds text back
  train DIR qwen2|llama3 VOCAB CORPUS...  DIR/tokenizer.json (+ tokenizer_config.json)
  eod DIR                                the id of <|endoftext|> or <|end_of_text|>
  encode DIR FILE...                     the ids of each file, one line each
  encode_jsonl DIR FILE                  the ids of each line's "text", one line each
  bench DIR FILE [IDS]                   tokens/s on one thread: one encode of the whole FILE, and
                                         encode_batch of its paragraphs; IDS (raw uint16 or
                                         uint32 by the vocabulary) must hold the whole file's ids
  with_specials DIR OUT TOKEN...         OUT: DIR's tokenizer with TOKENs as more special tokens
  chat DIR chatml|llama3 JSONL [SYSTEM]  the ids of each conversation of JSONL, one line each, as
                                         the model's chat template renders it (llama3: Llama 3's,
                                         which trims each content: Jinja's trim is Python's
                                         str.strip), SYSTEM first where it starts with no system
                                         message; tokenizers encodes the text up to each trained
                                         reply whole (the prompt, as apply_chat_template with
                                         add_generation_prompt), and each reply apart, as the
                                         model generates it after the prompt
  sp_train DIR VOCAB CORPUS...           DIR/tokenizer.model (the `sentencepiece` package)
  sp_encode DIR FILE...                  its ids of each file, with BOS, one line each
"""
import json
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def flagged_tokens():
    """Added tokens with each of tokenizers' flags, matched in the raw text (normalized False) or in
    the normalized one; FLAGS_TEXT has them where the flags change the ids."""
    from tokenizers import AddedToken
    return [AddedToken("<mask>", lstrip=True, normalized=False, special=True),  # RoBERTa's
            AddedToken("<sep>", rstrip=True, normalized=True),
            AddedToken("<both>", lstrip=True, rstrip=True, normalized=True),
            AddedToken("word", single_word=True, normalized=True),
            AddedToken("Word", single_word=True, normalized=False),
            AddedToken("QQ", normalized=False, special=True),
            AddedToken("caf\u00e9", normalized=True),       # NFC: also cafe + U+0301
            AddedToken("nai\u0308ve", normalized=False)]    # decomposed, matched so only


FLAGS_TEXT = (
    "flags: a <mask> b\t\u3000<mask>c x<mask>  <mask>\n"
    "d<sep>  e <sep>\u2028\u00a0\n f<sep>g <both>  h\u3000<both>\u3000i\n"
    "word words sword _word -word- word\u00e9 word\u0301 \u203fword 1word word1 (word) \u00e9word\n"
    "Word Words xWord Word_ QQword QQWord xQQword <sep>word Word<mask>\n"
    "caf\u00e9 cafe\u0301 na\u00efve nai\u0308ve\n"
    "<sep>  <mask> <mask>   <sep>end\n"
    "the end: word <both> \u3000")


MIXED_PARTS = ["hello", " ", "  ", "\n", "\r\n", "\t", "\u3000", "\u00a0", "\u2028", "\u0085",
               "\u1680", "\x1c", "\u200b", "\u00e9", "e\u0301", "\u0301", "_", "-", "\u203f",
               "\u200d", "\u24b6", "\u216b", "12", "'s", "!!", "\u65e5\u672c", "\U0001F44B", "W",
               "o", "cafe", "<mask>", "<sep>", "<both>", "word", "Word", "QQ", "caf\u00e9",
               "na\u00efve", "nai\u0308ve", "<think>", "<|endoftext|>", "<|end_of_text|>",
               "<|begin_of_text|>", "<|im",
               "\u180e", "\uac00\u11a7"]  # not White_Space; NFC keeps U+11A7 after an LV


def read(path):
    with open(path, encoding="utf-8", newline="") as f:  # keep \r\n as it is
        return f.read()


def train(out, kind, vocab, corpus):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers
    llama, smollm, runs = kind == "llama3", kind == "smollm2", kind == "digitruns"
    tok = Tokenizer(models.BPE(ignore_merges=llama))
    if not llama and not smollm and not runs:
        tok.normalizer = normalizers.NFC()
    if smollm or runs:  # StarCoder's and SmolLM2's: each digit apart, then GPT-2's pattern
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=smollm),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if llama else QWEN2), behavior="isolated",
                                 invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = (["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"] if llama else
                ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Whole files, not lines (Tokenizer.train's): merges across newlines, as released models have.
    tok.train_from_iterator((read(path) for path in corpus), trainer)
    # Added after training, as the released models have them: outside the BPE vocabulary.
    tok.add_special_tokens(["<|reserved_special_token_0|>"] if llama else ["<|fim_prefix|>"])
    tok.add_tokens(["<think>", "</think>"])  # not special (Qwen3's)
    tok.add_tokens(flagged_tokens())
    if llama:
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    eos = "<|end_of_text|>" if llama else "<|endoftext|>"
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": eos}, f)


def load(d):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def chat_ids(tok, kind, messages):
    """Prompt and reply segments: a trained reply is an assistant message without OpenAI's
    "weight": 0 or ms-swift's "loss": false."""
    ids, prompt = [], "" if kind == "chatml" else "<|begin_of_text|>"
    encode = lambda text: tok.encode(text, add_special_tokens=False).ids
    for m in messages:
        content = m["content"] if kind == "chatml" else m["content"].strip()  # Llama 3's trim
        header = (f"<|im_start|>{m['role']}\n" if kind == "chatml"
                  else f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n")
        end = "<|im_end|>\n" if kind == "chatml" else "<|eot_id|>"
        if m["role"] == "assistant" and m.get("weight", 1) != 0 and m.get("loss") is not False:
            ids += encode(prompt + header) + encode(content)
            prompt = end
        else:
            prompt += header + content + end
    return ids + encode(prompt)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "flags_text":
        with open(args[0], "a", encoding="utf-8", newline="") as f:
            f.write(FLAGS_TEXT)
    elif cmd == "mixed":
        import random
        rng = random.Random(int(args[2]))
        with open(args[0], "w") as f:
            for _ in range(int(args[1])):
                text = "".join(rng.choice(MIXED_PARTS) for _ in range(rng.randint(1, 40)))
                f.write(json.dumps({"text": text}) + "\n")
    elif cmd == "train":
        train(args[0], args[1], int(args[2]), args[3:])
    elif cmd == "eod":
        tok = load(args[0])
        print(next(i for i in map(tok.token_to_id, ["<|endoftext|>", "<|end_of_text|>"])
                   if i is not None))
    elif cmd == "encode":
        tok = load(args[0])
        for path in args[1:]:
            print(" ".join(map(str, tok.encode(read(path)).ids)))
    elif cmd == "encode_jsonl":
        tok = load(args[0])
        with open(args[1], encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f]
        for encoding in tok.encode_batch(texts):
            print(" ".join(map(str, encoding.ids)))
    elif cmd == "bench":
        import array
        tok = load(args[0])
        text = read(args[1])
        def timed(f):  # (result, wall seconds, CPU seconds of this process)
            wall, cpu = time.perf_counter(), time.process_time()
            result = f()
            return result, time.perf_counter() - wall, time.process_time() - cpu
        ids, whole, whole_cpu = timed(lambda: tok.encode(text).ids)
        paragraphs = [p + "\n\n" for p in text.split("\n\n")]
        n, batch, batch_cpu = timed(lambda: sum(len(e.ids) for e in tok.encode_batch(paragraphs)))
        import tokenizers
        print(f"tokenizers {tokenizers.__version__}: whole file {len(ids)} tokens in {whole:.2f} s "
              f"({whole_cpu:.2f} s CPU) = {len(ids) / whole_cpu:.0f} tokens/CPU s; "
              f"{len(paragraphs)} paragraphs (encode_batch) {n} tokens in {batch:.2f} s "
              f"({batch_cpu:.2f} s CPU) = {n / batch_cpu:.0f} tokens/CPU s")
        if len(args) > 2:
            width = "H" if tok.get_vocab_size() <= 65536 else "I"
            packed = array.array(width, open(args[2], "rb").read()).tolist()
            assert packed[:-1] == ids, "the packed ids are not the reference's"
            print(f"the packed ids are tokenizers' ({len(ids)})")
    elif cmd == "with_specials":
        tok = load(args[0])
        tok.add_special_tokens(args[2:])
        os.makedirs(args[1], exist_ok=True)
        tok.save(os.path.join(args[1], "tokenizer.json"))
    elif cmd == "chat":
        tok = load(args[0])
        with open(args[2], encoding="utf-8") as f:
            for line in f:
                messages = json.loads(line)["messages"]
                if len(args) > 3 and (not messages or messages[0]["role"] != "system"):
                    messages = [{"role": "system", "content": args[3]}] + messages
                print(" ".join(map(str, chat_ids(tok, args[1], messages))))
    elif cmd == "sp_train":
        import sentencepiece as spm
        spm.SentencePieceTrainer.train(input=",".join(args[2:]), model_prefix=f"{args[0]}/tokenizer",
                                       vocab_size=int(args[1]), model_type="bpe",
                                       byte_fallback=True, character_coverage=0.9995,
                                       minloglevel=2)
    elif cmd == "sp_encode":
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=os.path.join(args[0], "tokenizer.model"))
        for path in args[1:]:
            print(" ".join(map(str, [sp.bos_id()] + sp.encode(read(path)))))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
