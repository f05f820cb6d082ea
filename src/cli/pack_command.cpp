// `trainer pack`: text or token files -> packed-token HDF5 file(s) (docs/data-format.md). Parses
// the command line with Boost.Program_options and calls PackDataset (src/data/packer.h).
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>
#include <utility>

#include "cli/commands.h"
#include "common/log.h"
#include "data/packer.h"

namespace trainer {
namespace po = boost::program_options;

int RunPackCommand(const std::vector<std::string>& args) {
  PackOptions options;
  po::options_description description(
      "usage: trainer pack --input FILE... --output PATH [options]  (or FILE... --output PATH)\n"
      "Each input file is one document (each line of a JSON Lines file with --input-format "
      "jsonl);\n"
      "an end-of-document token follows each.\noptions");
  // clang-format off
  description.add_options()
      ("help,h", "show this help and exit")
      ("input,i", po::value<std::vector<std::string>>(&options.inputs)->multitoken(),
       "input files, one document each (required)")
      ("output,o", po::value<std::string>(&options.output),
       "HDF5 file to write, e.g. data.h5 (required)")
      ("tokenizer", po::value<std::string>(&options.tokenizer)->default_value(options.tokenizer),
       "bytes (vocab 257, eod 256), gpt2 (GPT-2's byte-level BPE; --tokenizer-dir), hf (a Hugging "
       "Face tokenizer.json: Qwen2/3, Llama-3; --tokenizer-dir), sentencepiece (a tokenizer.model: "
       "Llama-2; --tokenizer-dir), u16 or u32 (raw little-endian "
       "token files)")
      ("input-format", po::value<std::string>(&options.input_format)->default_value(options.input_format),
       "text (each file one document), jsonl (JSON Lines: each line an object, one document) or "
       "chat (JSON Lines of {\"messages\": [{\"role\", \"content\"}, ...]}: one conversation per "
       "line, with a /loss_mask that trains only the assistant's tokens)")
      ("chat-template", po::value<std::string>(&options.chat_template),
       "chat: chatml (Qwen, SmolLM2), llama3 (contents trimmed, as Llama 3's template does) or "
       "none (each message's content and a newline); "
       "default with --tokenizer hf llama3 where the tokenizer has <|start_header_id|> and not "
       "<|im_start|>, else chatml; none with the others (no special tokens)")
      ("system", po::value<std::string>(&options.system),
       "chat: a system message put first in each conversation that has none (ms-swift's "
       "--system; Qwen2.5-Instruct's template adds \"You are Qwen, created by Alibaba Cloud. You "
       "are a helpful assistant.\")")
      ("max-length", po::value<int64_t>(&options.max_length)->default_value(options.max_length),
       "chat: most tokens per conversation, its end-of-document token included; 0 = no limit")
      ("overlong", po::value<std::string>(&options.overlong)->default_value(options.overlong),
       "chat: truncate or drop the conversations longer than --max-length")
      ("jsonl-key", po::value<std::string>(&options.jsonl_key)->default_value(options.jsonl_key),
       "jsonl: the key whose string value is the document's text")
      ("tokenizer-dir", po::value<std::string>(&options.tokenizer_dir),
       "gpt2: the folder with vocab.json and merges.txt (or encoder.json and vocab.bpe); hf: the "
       "folder with tokenizer.json (and tokenizer_config.json); sentencepiece: the folder with "
       "tokenizer.model")
      ("vocab-size", po::value<int64_t>(&options.vocab_size)->default_value(options.vocab_size),
       "vocabulary size; 0 = the tokenizer's own (required for u16/u32)")
      ("eod-id", po::value<int64_t>(&options.eod_id)->default_value(options.eod_id),
       "end-of-document id; -1 = the tokenizer's own (vocab-size - 1 for u16/u32)")
      ("val-fraction", po::value<double>(&options.val_fraction)->default_value(0.0),
       "fraction of the tokens (the end of the stream) written to the validation file")
      ("val-output", po::value<std::string>(&options.val_output)->default_value("", "\"\""),
       "validation file; empty = the output name with .val before .h5")
      ("force", "replace existing output files (and remove a stale .val.h5 of an earlier pack)")
      ("quiet", "no progress lines on stderr");
  // clang-format on
  po::positional_options_description positional;  // bare arguments are inputs too
  positional.add("input", -1);
  po::variables_map values;
  try {
    po::store(po::command_line_parser(args).options(description).positional(positional).run(),
              values);
    po::notify(values);
  } catch (const po::error& e) {
    Status usage = UsageError(std::string("invalid pack arguments (command line): ") + e.what() +
                              ". See `trainer pack --help`");
    LogError(usage.message());
    return usage.exit_code();
  }
  if (values.count("help")) {
    std::ostringstream help;
    help << description;
    std::cout << help.str();
    return static_cast<int>(ExitCode::kOk);
  }
  // Options of one input format are refused with another, where they would do nothing.
  const auto given = [&values](const char* flag) {
    return values.count(flag) > 0 && !values[flag].defaulted();
  };
  for (const auto& [flag, format] : {std::pair{"chat-template", "chat"},
                                     {"system", "chat"},
                                     {"max-length", "chat"},
                                     {"overlong", "chat"},
                                     {"jsonl-key", "jsonl"}}) {
    if (!given(flag) || options.input_format == format) continue;
    Status usage = UsageError(StrFormat(
        "--%s (pack) applies to --input-format %s, and this pack reads %s: it would do nothing. "
        "Leave it out, or pass --input-format %s",
        flag, format, options.input_format.c_str(), format));
    LogError(usage.message());
    return usage.exit_code();
  }
  options.show_progress = values.count("quiet") == 0;
  options.force = values.count("force") > 0;
  PackSummary summary;
  Status status = PackDataset(options, &summary);
  if (!status.ok()) {
    LogError(status.message());
    return status.exit_code();
  }
  LogInfo(summary.OneLine());
  return static_cast<int>(ExitCode::kOk);
}

}  // namespace trainer
