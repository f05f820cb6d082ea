// PackDataset: `trainer pack` without the command line. Streams input files (one document each, or
// one per line of JSON Lines)
// through a Tokenizer into a packed-token HDF5 file, optionally sending the end of the token
// stream to a validation file (the cut is planned from token counts first, so each token is
// written once, to its file). Writes `<output>.<host>-<pid>.tmp` (ProcessTemporaryPath) and
// renames it, so a crash never leaves a half-written file under the real name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/tokenizer.h"

namespace trainer {

struct PackOptions {
  std::vector<std::string> inputs;    // one document per file (text), or per line (jsonl), in order
  std::string input_format = "text";  // text | jsonl (JSON Lines: each line an object) | chat
  // chat: chatml | llama3 | none (data/chat.h); "": chatml with --tokenizer hf, else none
  std::string chat_template;
  // chat: a system message put first in each conversation that starts with none ("": none), as
  // Qwen2.5's template and ms-swift's --system add one
  std::string system;
  int64_t max_length = 0;                // chat: 0 = any; else tokens per conversation (with eod)
  std::string overlong = "truncate";     // chat: truncate | drop conversations over max_length
  std::string jsonl_key = "text";        // jsonl: the key whose string is the document
  std::string output;                    // e.g. data.h5
  std::string tokenizer = "bytes";       // bytes | gpt2 | hf | u16 | u32 (MakeTokenizer)
  std::string tokenizer_dir;             // gpt2, hf: the tokenizer's folder
  int64_t vocab_size = 0;                // 0: the tokenizer's own (required for u16/u32)
  int64_t eod_id = -1;                   // -1: the tokenizer's own (vocab_size - 1 for u16/u32)
  double val_fraction = 0.0;             // in [0, 1): the last fraction of tokens go to val_output
  std::string val_output;                // empty: DefaultValidationPath(output)
  int64_t read_chunk_bytes = int64_t{4} << 20;  // input read size
  int64_t chunk_tokens = int64_t{1} << 20;      // HDF5 chunk of /tokens (smaller for tiny inputs)
  bool show_progress = true;                    // progress lines on stderr for runs over ~2 s
  // Replace existing outputs (the training file, and the validation file: the one written, or,
  // without a split, a stale one at the default name, which is removed). Without it, refuse them.
  bool force = false;
};

struct PackedFile {
  std::string path;
  int64_t documents = 0;
  int64_t tokens = 0;
};

struct PackSummary {
  std::string tokenizer;
  int64_t vocab_size = 0;
  int64_t documents = 0;          // non-empty documents (files, or lines of JSON Lines)
  int64_t tokens = 0;             // including one eod per document
  int64_t empty_inputs = 0;       // empty documents (skipped: no tokens, no eod)
  bool chat = false;              // --input-format chat: the counts below and /loss_mask
  int64_t conversations = 0;      // chat: conversations read (written, truncated or dropped)
  int64_t truncated = 0;          // chat: conversations cut to max_length
  int64_t dropped = 0;            // chat: conversations over max_length left out
  int64_t trained_tokens = 0;     // chat: tokens of mask 1
  std::vector<PackedFile> files;  // the training file, then the validation file if any
  std::string removed;            // with --force and no split: the stale validation file removed

  // "packed 3 documents, 1234 tokens (bytes, vocab 257): data.h5 (...), data.val.h5 (...)"
  std::string OneLine() const;
};

// data.h5 -> data.val.h5; names without ".h5" get ".val.h5" appended.
std::string DefaultValidationPath(const std::string& output);

// The token index where the validation part starts: the last `val_fraction` of `total` tokens,
// cut at the nearest document boundary when there are several documents (doc_offsets has the
// start of each plus the total), else at a token position. Both parts keep >= 1 document (or
// >= 2 tokens for a single document). Data error when there is too little to split.
StatusOr<int64_t> ValidationCut(const std::vector<uint64_t>& doc_offsets, double val_fraction);

Status PackDataset(const PackOptions& options, PackSummary* summary);
// The same with a given tokenizer (options.tokenizer, vocab_size and eod_id are not used).
Status PackDatasetWithTokenizer(const PackOptions& options, Tokenizer* tokenizer,
                                PackSummary* summary);

}  // namespace trainer
