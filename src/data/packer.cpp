// PackDataset (see packer.h).
#include "data/packer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "common/filesystem.h"
#include "common/log.h"
#include "common/strings.h"
#include "data/chat.h"
#include "data/json_line.h"
#include "data/progress.h"
#include "data/token_file_writer.h"
#include "data/tokenizer.h"

namespace trainer {
namespace {

// Removes the listed files when it goes out of scope, unless Release()d: no half-written .tmp
// files are left behind after an error.
class TemporaryFiles {
 public:
  ~TemporaryFiles() {
    for (const std::string& path : paths_) std::remove(path.c_str());
  }
  void Add(const std::string& path) { paths_.push_back(path); }
  void Release() { paths_.clear(); }

 private:
  std::vector<std::string> paths_;
};

Status CheckOutputFolder(const std::string& path, const char* flag) {
  std::string folder = ParentDirectory(path);
  struct stat info;
  if (stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    return DataError(
        StrFormat("cannot write output (%s, %s): folder %s does not exist. Create it "
                  "or choose another %s",
                  path.c_str(), flag, folder.c_str(), flag));
  if (access(folder.c_str(), W_OK) != 0)
    return DataError(
        StrFormat("cannot write output (%s, %s): folder %s is not writable. Choose "
                  "a writable %s",
                  path.c_str(), flag, folder.c_str(), flag));
  return Status::Ok();
}

// Sizes of the inputs in bytes; errors name a missing or unreadable input.
Status StatInputs(const std::vector<std::string>& inputs, std::vector<int64_t>* sizes) {
  for (const std::string& input : inputs) {
    struct stat info;
    if (stat(input.c_str(), &info) != 0)
      return DataError("input file not found (" + input +
                       ", --input): no such file. Check the --input list");
    if (!S_ISREG(info.st_mode))
      return DataError("input is not a regular file (" + input +
                       ", --input): pass files, not folders");
    if (access(input.c_str(), R_OK) != 0)
      return DataError("input file not readable (" + input +
                       ", --input): permission denied. Fix its permissions");
    sizes->push_back(static_cast<int64_t>(info.st_size));
  }
  return Status::Ok();
}

// Reads inputs chunk by chunk through the tokenizer; shared by the counting and writing passes.
// A text input is one document; each line of a JSON Lines input (input_format jsonl) is one, its
// text the string at jsonl_key. Memory: one read chunk and its tokens (and one line), whatever the
// corpus size.
class InputReader {
 public:
  InputReader(const PackOptions& options, Tokenizer* tokenizer, int64_t total_bytes)
      : tokenizer_(tokenizer),
        jsonl_(options.input_format == "jsonl" || options.input_format == "chat"),
        chat_(options.input_format == "chat"),
        chat_template_(ChatTemplateFor(options.chat_template, tokenizer)),
        system_(options.system),
        max_length_(options.max_length),
        drop_overlong_(options.overlong == "drop"),
        jsonl_key_(options.jsonl_key),
        show_progress_(options.show_progress),
        progress_("pack", total_bytes, stderr),
        bytes_(static_cast<size_t>(std::max<int64_t>(1, options.read_chunk_bytes))) {
    tokens_.reserve(bytes_.size());
  }

  // Calls consume(tokens, count, mask) for the tokens of each document of `input` (mask: one byte
  // per token for chat, else null) and then end_document(count) with its number of tokens
  // (without an eod).
  template <typename Consume, typename EndDocument>
  Status Read(const std::string& input, Consume consume, EndDocument end_document) {
    std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(input.c_str(), "rb"), std::fclose);
    if (!file) return DataError("cannot open input file (" + input + ", --input): fopen failed");
    int64_t count = 0;
    const auto tokenized = [&]() -> Status {
      TRAINER_RETURN_IF_ERROR(
          consume(tokens_.data(), tokens_.size(), chat_ ? mask_.data() : nullptr));
      count += static_cast<int64_t>(tokens_.size());
      tokens_.clear();
      mask_.clear();
      return Status::Ok();
    };
    int64_t line_number = 0;
    const auto end_line = [&]() -> Status {  // a JSON Lines document
      ++line_number;
      if (line_.find_first_not_of(" \t\r") == std::string::npos) return Status::Ok();
      count = 0;
      if (chat_) {
        const std::string source =
            StrFormat("%s line %lld", input.c_str(), static_cast<long long>(line_number));
        const Status parsed = JsonChatMessages(line_, &messages_);
        if (!parsed.ok())
          return DataError(
              StrFormat("bad chat line (%s, --input-format chat): %s. Each line must be an object "
                        "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]}",
                        source.c_str(), parsed.message().c_str()));
        if (!system_.empty() && (messages_.empty() || messages_.front().role != "system"))
          messages_.insert(messages_.begin(), ChatMessage{"system", system_});
        TRAINER_RETURN_IF_ERROR(
            RenderChat(messages_, chat_template_, tokenizer_, source, &tokens_, &mask_));
        ++stats_.conversations;
        if (max_length_ > 0 && static_cast<int64_t>(tokens_.size()) + 1 > max_length_) {
          const size_t keep = drop_overlong_ ? 0 : static_cast<size_t>(max_length_ - 1);
          ++(drop_overlong_ ? stats_.dropped : stats_.truncated);
          tokens_.resize(keep);
          mask_.resize(keep);
        }
        for (uint8_t m : mask_) stats_.trained_tokens += m;
        TRAINER_RETURN_IF_ERROR(tokenized());
        return end_document(count);
      }
      text_.clear();
      const Status parsed = JsonStringField(line_, jsonl_key_, &text_);
      if (!parsed.ok())
        return DataError(
            StrFormat("bad JSON line (%s line %lld, --input-format jsonl): %s. Each "
                      "line must be an object with the text at \"%s\" (--jsonl-key)",
                      input.c_str(), static_cast<long long>(line_number), parsed.message().c_str(),
                      jsonl_key_.c_str()));
      tokenizer_->BeginDocument(
          StrFormat("%s line %lld", input.c_str(), static_cast<long long>(line_number)));
      TRAINER_RETURN_IF_ERROR(tokenizer_->Encode(reinterpret_cast<const uint8_t*>(text_.data()),
                                                 text_.size(), &tokens_));
      TRAINER_RETURN_IF_ERROR(tokenizer_->EndDocument(&tokens_));
      TRAINER_RETURN_IF_ERROR(tokenized());
      return end_document(count);
    };
    if (!jsonl_) tokenizer_->BeginDocument(input);
    line_.clear();
    for (;;) {
      size_t n = std::fread(bytes_.data(), 1, bytes_.size(), file.get());
      if (n == 0) {
        if (std::ferror(file.get()))
          return DataError("cannot read input file (" + input + ", --input): read error");
        break;
      }
      if (!jsonl_) {
        TRAINER_RETURN_IF_ERROR(tokenizer_->Encode(bytes_.data(), n, &tokens_));
        TRAINER_RETURN_IF_ERROR(tokenized());
      } else {
        const char* chunk = reinterpret_cast<const char*>(bytes_.data());
        for (size_t at = 0; at < n;) {
          const char* newline = static_cast<const char*>(std::memchr(chunk + at, '\n', n - at));
          const size_t end = newline ? static_cast<size_t>(newline - chunk) : n;
          line_.append(chunk + at, end - at);
          at = end;
          if (newline) {
            ++at;
            TRAINER_RETURN_IF_ERROR(end_line());
            line_.clear();
          }
        }
      }
      bytes_done_ += static_cast<int64_t>(n);
      if (show_progress_) progress_.Update(bytes_done_);
    }
    if (jsonl_) return line_.empty() ? Status::Ok() : end_line();
    TRAINER_RETURN_IF_ERROR(tokenizer_->EndDocument(&tokens_));
    TRAINER_RETURN_IF_ERROR(tokenized());
    return end_document(count);
  }

  void Finish() {
    if (show_progress_) progress_.Finish();
  }

  struct ChatStats {
    int64_t conversations = 0, truncated = 0, dropped = 0, trained_tokens = 0;
  };
  // Chat counts since the last ResetStats (the counting pass reads the inputs once more).
  const ChatStats& stats() const { return stats_; }
  void ResetStats() { stats_ = ChatStats(); }

 private:
  Tokenizer* tokenizer_;
  bool jsonl_;
  bool chat_;
  std::string chat_template_;
  std::string system_;  // PackOptions::system
  int64_t max_length_;
  bool drop_overlong_;
  ChatStats stats_;
  std::vector<ChatMessage> messages_;
  std::vector<uint8_t> mask_;
  std::string jsonl_key_;
  bool show_progress_;
  ProgressReporter progress_;
  int64_t bytes_done_ = 0;
  std::vector<uint8_t> bytes_;
  std::vector<uint32_t> tokens_;
  std::string line_, text_;
};

// Token count (without eod) of every document, from the input's size when the tokenizer can tell,
// else by tokenizing it once without writing.
Status CountTokens(const PackOptions& options, const std::vector<int64_t>& sizes,
                   Tokenizer* tokenizer, InputReader* reader, std::vector<uint64_t>* counts) {
  auto discard = [](const uint32_t*, size_t, const uint8_t*) { return Status::Ok(); };
  auto note = [counts](int64_t count) {
    counts->push_back(static_cast<uint64_t>(count));
    return Status::Ok();
  };
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    const int64_t count = options.input_format != "text" ? -1 : tokenizer->TokenCount(sizes[i]);
    if (count >= 0)
      counts->push_back(static_cast<uint64_t>(count));
    else
      TRAINER_RETURN_IF_ERROR(reader->Read(options.inputs[i], discard, note));
  }
  return Status::Ok();
}

Status RenameInto(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    return DataError("cannot rename output (" + from + " -> " + to + "): " + std::strerror(errno));
  return Status::Ok();
}

// The outputs of a pack that exist already: the training file, and the validation file (the one
// this pack writes, or without a split the one an earlier pack left at the default name, which
// would otherwise pair with the new training file). Refused unless `force`.
Status CheckExistingOutputs(const PackOptions& options, bool split, const std::string& val_path,
                            std::string* stale_val) {
  stale_val->clear();
  std::vector<std::string> existing;
  if (PathExists(options.output)) existing.push_back(options.output);
  if (PathExists(val_path)) {
    existing.push_back(val_path);
    if (!split) *stale_val = val_path;
  }
  if (existing.empty() || options.force) return Status::Ok();
  std::string names;
  for (const std::string& e : existing) names += (names.empty() ? "" : ", ") + e;
  const std::string why =
      stale_val->empty()
          ? "trainer pack replaces files only when asked"
          : StrFormat(
                "%s is the validation file of an earlier pack with --val-fraction, which "
                "this pack (no split) would leave paired with the new %s",
                stale_val->c_str(), options.output.c_str());
  return UsageError(
      StrFormat("output exists (%s; trainer pack --output %s): %s. Pass --force to "
                "replace %s, or choose another --output",
                names.c_str(), options.output.c_str(), why.c_str(),
                stale_val->empty() ? (existing.size() == 1 ? "it" : "them")
                                   : "the outputs and remove the stale file"));
}

// Whether two paths name the same file, whether or not it exists ("./d.h5" and "d.h5", a
// folder reached through a symbolic link): their absolute forms with the existing part resolved.
bool SamePath(const std::string& a, const std::string& b) {
  std::error_code error_a, error_b;
  const std::filesystem::path canonical_a =
      std::filesystem::weakly_canonical(std::filesystem::absolute(a), error_a);
  const std::filesystem::path canonical_b =
      std::filesystem::weakly_canonical(std::filesystem::absolute(b), error_b);
  if (error_a || error_b) return a == b;
  return canonical_a == canonical_b;
}

}  // namespace

std::string PackSummary::OneLine() const {
  std::string line =
      "packed " + Plural(documents, "document") + ", " + Plural(tokens, "token") +
      StrFormat(" (%s, vocab %lld)", tokenizer.c_str(), static_cast<long long>(vocab_size));
  if (empty_inputs > 0) line += ", " + Plural(empty_inputs, "empty document") + " skipped";
  for (size_t i = 0; i < files.size(); ++i) {
    line += (i == 0 ? ": " : ", ") + files[i].path + " (" + Plural(files[i].tokens, "token") +
            ", " + Plural(files[i].documents, "document") + ")";
  }
  if (chat)
    line +=
        StrFormat("; chat: %s, %lld truncated, %lld dropped, %s",
                  Plural(conversations, "conversation").c_str(), static_cast<long long>(truncated),
                  static_cast<long long>(dropped), Plural(trained_tokens, "trained token").c_str());
  if (!removed.empty()) line += "; removed the stale " + removed + " of an earlier pack";
  return line;
}

std::string DefaultValidationPath(const std::string& output) {
  const std::string ext = ".h5";
  if (output.size() > ext.size() && EndsWith(output, ext))
    return output.substr(0, output.size() - ext.size()) + ".val.h5";
  return output + ".val.h5";
}

StatusOr<int64_t> ValidationCut(const std::vector<uint64_t>& doc_offsets, double val_fraction) {
  int64_t documents = static_cast<int64_t>(doc_offsets.size()) - 1;
  int64_t total = documents > 0 ? static_cast<int64_t>(doc_offsets.back()) : 0;
  int64_t want_val = std::llround(val_fraction * static_cast<double>(total));
  if (documents >= 2) {
    // The boundary k in [1, documents - 1] closest to total - want_val.
    int64_t target = total - want_val;
    int64_t best = static_cast<int64_t>(doc_offsets[1]);
    for (int64_t k = 2; k < documents; ++k) {
      int64_t offset = static_cast<int64_t>(doc_offsets[k]);
      if (std::llabs(offset - target) < std::llabs(best - target)) best = offset;
    }
    return best;
  }
  if (total < 4)
    return DataError(
        StrFormat("too little data to split (--val-fraction %g): %lld tokens in one "
                  "document, need at least 4. Pack more text or drop --val-fraction",
                  val_fraction, static_cast<long long>(total)));
  return total - std::clamp<int64_t>(want_val, 2, total - 2);
}

Status PackDataset(const PackOptions& options, PackSummary* summary) {
  TRAINER_ASSIGN_OR_RETURN(
      std::unique_ptr<Tokenizer> tokenizer,
      MakeTokenizer(options.tokenizer, options.vocab_size, options.eod_id, options.tokenizer_dir));
  return PackDatasetWithTokenizer(options, tokenizer.get(), summary);
}

Status PackDatasetWithTokenizer(const PackOptions& options, Tokenizer* tokenizer,
                                PackSummary* summary) {
  *summary = PackSummary();
  if (options.inputs.empty())
    return UsageError("no input files (pack, --input): pass at least one file");
  if (options.input_format != "text" && options.input_format != "jsonl" &&
      options.input_format != "chat")
    return UsageError("unknown --input-format (pack): '" + options.input_format +
                      "'. Use text (each file one document), jsonl (each line one) or chat (each "
                      "line one conversation)");
  const bool chat = options.input_format == "chat";
  if (chat) {
    const std::string chat_template = ChatTemplateFor(options.chat_template, tokenizer);
    TRAINER_RETURN_IF_ERROR(CheckChatTemplate(chat_template));
    TRAINER_RETURN_IF_ERROR(CheckChatTokenizer(chat_template, tokenizer));
    if (options.overlong != "truncate" && options.overlong != "drop")
      return UsageError("unknown --overlong (pack): '" + options.overlong +
                        "'. Use truncate or drop");
    if (options.max_length < 0 || options.max_length == 1)
      return UsageError(StrFormat("invalid --max-length (pack): %lld. Pass 0 (no limit) or >= 2",
                                  static_cast<long long>(options.max_length)));
  }
  if (options.input_format != "text" && (tokenizer->name() == "u16" || tokenizer->name() == "u32"))
    return UsageError("--input-format " + options.input_format +
                      " (pack) holds text: use --tokenizer bytes, gpt2, hf or sentencepiece, "
                      "not " +
                      tokenizer->name());
  if (options.output.empty())
    return UsageError("no output file (pack, --output): pass the HDF5 file to write");
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0))
    return UsageError(
        StrFormat("invalid --val-fraction (pack): %g is outside [0, 1). Pass e.g. "
                  "0.01 to hold out 1%% of the tokens",
                  options.val_fraction));
  const bool split = options.val_fraction > 0.0;
  const std::string val_path =
      options.val_output.empty() ? DefaultValidationPath(options.output) : options.val_output;
  // Checked with or without a split: without one, --force removes an existing validation file
  // as stale, which must never be the output or an input.
  if (SamePath(val_path, options.output))
    return UsageError("--val-output " + val_path + " is the same file as --output " +
                      options.output + " (pack): pick another name for the validation file");
  // An output that is one of the inputs would be replaced while (or before) it is read, --force
  // or not.
  for (const std::string& input : options.inputs) {
    const char* flag = SamePath(input, options.output) ? "--output"
                       : SamePath(input, val_path)     ? "--val-output"
                                                       : nullptr;
    if (flag != nullptr)
      return UsageError(
          StrFormat("%s %s is also an input (pack): it would be overwritten (or, without "
                    "a split, removed as a stale validation file) before it is read. Write to "
                    "another file",
                    flag, input.c_str()));
  }
  std::vector<int64_t> sizes;
  TRAINER_RETURN_IF_ERROR(StatInputs(options.inputs, &sizes));
  std::string stale_val;
  TRAINER_RETURN_IF_ERROR(CheckExistingOutputs(options, split, val_path, &stale_val));
  TRAINER_RETURN_IF_ERROR(CheckOutputFolder(options.output, "--output"));
  if (split) TRAINER_RETURN_IF_ERROR(CheckOutputFolder(val_path, "--val-output"));
  const std::string inputs_named =
      options.inputs.front() + (options.inputs.size() > 1 ? ", ..." : "");

  int64_t total_bytes = 0;
  bool must_count = false;  // a counting pass reads the inputs twice
  for (size_t i = 0; i < sizes.size(); ++i) {
    total_bytes += sizes[i];
    must_count = must_count ||
                 (split && (options.input_format != "text" || tokenizer->TokenCount(sizes[i]) < 0));
  }
  InputReader reader(options, tokenizer, must_count ? 2 * total_bytes : total_bytes);
  // Nothing to write: empty inputs, or every conversation dropped for its length.
  const auto nothing_packed = [&]() {
    const int64_t dropped = reader.stats().dropped;
    if (dropped > 0)
      return DataError(StrFormat(
          "nothing packed (%s): --overlong drop dropped %s longer than --max-length %lld, and "
          "no other held text. Raise --max-length (the fine-tuning sequence length) or pass "
          "--overlong truncate",
          inputs_named.c_str(), Plural(dropped, "conversation").c_str(),
          static_cast<long long>(options.max_length)));
    return DataError(StrFormat(
        "empty input (%s): all %zu input files are empty. Pass files that hold text or tokens",
        inputs_named.c_str(), options.inputs.size()));
  };

  // With a split, plan the stream first: document starts, the total and the cut.
  int64_t total = -1;  // unknown until written when there is no split
  int64_t cut = std::numeric_limits<int64_t>::max();
  if (split) {
    // Each document's count, made in place into the planned document starts and the total (8
    // bytes a document, freed once the cut is known).
    std::vector<uint64_t> planned;
    TRAINER_RETURN_IF_ERROR(CountTokens(options, sizes, tokenizer, &reader, &planned));
    size_t documents = 0;
    uint64_t start = 0;
    for (const uint64_t count : planned)  // read before its place (at or before it) is written
      if (count > 0) planned[documents++] = start, start += count + 1;
    planned.resize(documents);
    planned.push_back(start);
    total = static_cast<int64_t>(start);
    if (total == 0) return nothing_packed();
    TRAINER_ASSIGN_OR_RETURN(cut, ValidationCut(planned, options.val_fraction));
    std::vector<uint64_t>().swap(planned);
  }

  // Every input byte yields at most one token (plus one eod per document): small corpora get
  // small chunks instead of a mostly empty 1 Mi-token chunk.
  const int64_t max_tokens =
      total >= 0 ? total : total_bytes + static_cast<int64_t>(options.inputs.size());
  const TokenFileInfo info{tokenizer->vocab_size(), tokenizer->eod_id(), tokenizer->name(), chat};
  TemporaryFiles temporaries;
  // This process's own names: a second pack of the same --output (two jobs, a requeue) writes
  // its own file, and the last rename wins; a killed pack's file is removed by the next.
  for (const std::string& path : {options.output, val_path}) RemoveDeadProcessTemporaries(path);
  const std::string train_tmp = ProcessTemporaryPath(options.output);
  const std::string val_tmp = ProcessTemporaryPath(val_path);
  temporaries.Add(train_tmp);
  TRAINER_ASSIGN_OR_RETURN(std::unique_ptr<TokenFileWriter> train,
                           TokenFileWriter::Create(train_tmp, info,
                                                   std::clamp<int64_t>(std::min(max_tokens, cut), 1,
                                                                       options.chunk_tokens)));
  std::unique_ptr<TokenFileWriter> val;
  if (split) {
    temporaries.Add(val_tmp);
    TRAINER_ASSIGN_OR_RETURN(
        val, TokenFileWriter::Create(val_tmp, info,
                                     std::clamp<int64_t>(total - cut, 1, options.chunk_tokens)));
    TRAINER_RETURN_IF_ERROR(val->AddDocumentStart(0));  // at the cut
  }

  // The writing pass: one eod after each non-empty document.
  SplitTokenWriter writer(train.get(), val.get(), cut);
  auto write = [&writer](const uint32_t* tokens, size_t n, const uint8_t* mask) {
    return writer.Append(tokens, n, mask);
  };
  const uint32_t eod = static_cast<uint32_t>(tokenizer->eod_id());
  int64_t documents = 0;
  auto end_document = [&](int64_t count) {
    if (count == 0) {  // an empty document: skipped, no eod
      ++summary->empty_inputs;
      return Status::Ok();
    }
    ++documents;
    TRAINER_RETURN_IF_ERROR(writer.StartDocument(writer.position() - count));
    return writer.Append(&eod, 1);  // mask 0 for chat
  };
  reader.ResetStats();
  for (const std::string& input : options.inputs)
    TRAINER_RETURN_IF_ERROR(reader.Read(input, write, end_document));
  reader.Finish();
  if (writer.position() == 0) return nothing_packed();
  if (chat && reader.stats().trained_tokens == 0) {
    const std::string within =
        options.max_length > 0
            ? StrFormat(" within --max-length %lld", static_cast<long long>(options.max_length))
            : "";
    return DataError(StrFormat(
        "no trained tokens (%s, --input-format chat): none of the %s has an assistant message "
        "with content%s, and the loss mask trains only the assistant's tokens. Give the "
        "conversations their assistant replies (role \"assistant\")%s",
        inputs_named.c_str(), Plural(reader.stats().conversations, "conversation").c_str(),
        within.c_str(),
        reader.stats().truncated + reader.stats().dropped > 0 ? ", or raise --max-length" : ""));
  }
  TRAINER_ASSERT(!split || writer.position() == total,
                 "the tokenizer gave other token counts than planned");
  // With a split, each file must train (or measure) something on its own.
  for (int side = 0; split && chat && side < 2; ++side)
    if (writer.trained(side) == 0)
      return DataError(StrFormat(
          "no trained tokens in the %s file (%s, --val-fraction %g): the conversations that fall "
          "there have no assistant reply, and its loss mask would count nothing. Pick another "
          "--val-fraction, or order the input so that conversations with replies reach both "
          "parts",
          side == 0 ? "training" : "validation",
          side == 0 ? options.output.c_str() : val_path.c_str(), options.val_fraction));
  summary->tokenizer = tokenizer->name();
  summary->vocab_size = tokenizer->vocab_size();
  summary->documents = documents;
  summary->tokens = writer.position();
  summary->chat = chat;
  summary->conversations = reader.stats().conversations;
  summary->truncated = reader.stats().truncated;
  summary->dropped = reader.stats().dropped;
  summary->trained_tokens = reader.stats().trained_tokens;
  summary->empty_inputs -= summary->dropped;  // counted as empty by end_document

  if (!split) {
    TRAINER_RETURN_IF_ERROR(train->Finish());
    TRAINER_RETURN_IF_ERROR(RenameInto(train_tmp, options.output));
    temporaries.Release();
    if (!stale_val.empty() && std::remove(stale_val.c_str()) != 0)
      return DataError(
          StrFormat("cannot remove the stale %s (trainer pack --force): %s. Remove it "
                    "by hand: a run would pair it with %s",
                    stale_val.c_str(), std::strerror(errno), options.output.c_str()));
    summary->removed = stale_val;
    summary->files.push_back({options.output, summary->documents, summary->tokens});
    return Status::Ok();
  }
  const int64_t train_documents = train->num_documents(), val_documents = val->num_documents();
  TRAINER_RETURN_IF_ERROR(train->Finish());
  TRAINER_RETURN_IF_ERROR(val->Finish());
  TRAINER_RETURN_IF_ERROR(RenameInto(val_tmp, val_path));
  TRAINER_RETURN_IF_ERROR(RenameInto(train_tmp, options.output));
  temporaries.Release();
  summary->files.push_back({options.output, train_documents, cut});
  summary->files.push_back({val_path, val_documents, total - cut});
  return Status::Ok();
}

}  // namespace trainer
