// `trainer sample CHECKPOINT`: text from a trained model. One process loads the whole model (a
// checkpoint of any layout), with the config the checkpoint carries, on the CPU or the GPU
// (Global.device). The prompt fills the context; each new token is drawn from the last position's
// logits (softmax at --temperature over the --top-k likeliest; temperature 0 takes the likeliest),
// the window sliding once the context holds max_seq_len tokens. For the bytes tokenizer (vocab
// 257), and with --tokenizer-dir (GPT-2's BPE files the data was packed with, or the model's
// tokenizer.json or SentencePiece tokenizer.model), the prompt and the output are text; otherwise
// token ids (--prompt-ids in, ids out). With --chat the prompt is a user's message (after
// --system's), rendered with the chat template that trainer pack --input-format chat uses and the
// assistant's header; the reply is printed without the prompt and ends at the template's end marker
// (chat.h).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <utility>

#include "checkpoint/checkpoint.h"
#include "cli/checkpoint_model.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/run_context.h"
#include "cli/token_draw.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "data/bpe_tokenizer.h"
#include "data/chat.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/parameters.h"

namespace trainer {
namespace {

struct SampleOptions {
  std::string checkpoint, prompt, prompt_ids, output, tokenizer_dir, system, chat_template;
  bool chat = false;
  int tokens = 256, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 1337;
  std::vector<std::string> overrides;
};

// How tokens read and print: bytes (vocab 257), GPT-2's BPE, a Hugging Face tokenizer.json or a
// SentencePiece tokenizer.model (--tokenizer-dir), or ids.
class TokenText {
 public:
  Status Setup(const SampleOptions& o, const ModelConfig& model) {
    vocab_size_ = model.vocab_size;
    eod_ = model.vocab_size - 1;  // pack's last id, for bytes and ids
    bytes_ = model.vocab_size == ByteTokenizer::kVocabSize;
    if (o.tokenizer_dir.empty()) return Status::Ok();
    const std::string& dir = o.tokenizer_dir;
    // The model's own, as pack --tokenizer hf reads it: a byte-level tokenizer.json (Llama-3,
    // Qwen), else a SentencePiece tokenizer.model (Llama-2, Mistral).
    if (PathExists(dir + "/tokenizer.json") || PathExists(dir + "/tokenizer.model")) {
      TRAINER_ASSIGN_OR_RETURN(model_tokenizer_, MakeHfTokenizer(dir, "--tokenizer-dir", 0, -1));
      TRAINER_RETURN_IF_ERROR(CheckTokenizerFitsModel(dir, model_tokenizer_->vocab_size(), model));
      hf_ = dynamic_cast<HfTokenizer*>(model_tokenizer_.get());
      sp_ = dynamic_cast<SentencePieceTokenizer*>(model_tokenizer_.get());
      eod_ = static_cast<int32_t>(model_tokenizer_->eod_id());
      return Status::Ok();
    }
    TRAINER_ASSIGN_OR_RETURN(bpe_, LoadModelTokenizer(o.tokenizer_dir, model));
    const int64_t eod = bpe_->Find(BpeTokenizer::kEndOfText);
    if (eod >= 0) eod_ = static_cast<int32_t>(eod);
    return Status::Ok();
  }
  bool is_text() const { return bytes_ || bpe_ != nullptr || hf_ != nullptr || sp_ != nullptr; }
  int32_t eod() const { return eod_; }

  // --chat: the messages rendered with the template, then the assistant's header; *reply_end gets
  // the text that ends the reply.
  Status ChatPrompt(const SampleOptions& o, std::vector<int32_t>* tokens, std::string* reply_end) {
    if (!is_text() || o.prompt.empty() || !o.prompt_ids.empty())
      return UsageError(
          is_text() ? std::string(o.prompt_ids.empty()
                                      ? "--chat (sample) needs the user's message: give --prompt "
                                        "TEXT"
                                      : "--chat (sample) takes the user's message as --prompt "
                                        "TEXT, not --prompt-ids")
                    : StrFormat("--chat (sample) needs text: this model's vocabulary is %d, so "
                                "give its tokenizer's folder with --tokenizer-dir",
                                vocab_size_));
    Tokenizer* tokenizer = model_tokenizer_.get();
    if (tokenizer == nullptr) {
      own_tokenizer_ = bytes_ && bpe_ == nullptr
                           ? std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>())
                           : std::make_unique<BpeTokenizer>(bpe_, eod_);
      tokenizer = own_tokenizer_.get();
    }
    const std::string chat_template = ChatTemplateFor(o.chat_template, tokenizer);
    TRAINER_RETURN_IF_ERROR(CheckChatTemplate(chat_template, "sample"));
    TRAINER_RETURN_IF_ERROR(CheckChatTokenizer(chat_template, tokenizer, "sample"));
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    std::vector<uint32_t> ids;
    TRAINER_RETURN_IF_ERROR(RenderChatPrompt(messages, chat_template, tokenizer, &ids));
    tokens->assign(ids.begin(), ids.end());
    *reply_end = ChatReplyEnd(chat_template);
    return CheckIds(*tokens);
  }

  // The prompt as tokens: --prompt's text, or --prompt-ids; empty: one end-of-document token
  // (the start of a document).
  Status Prompt(const SampleOptions& o, std::vector<int32_t>* tokens) const {
    tokens->clear();
    if (!o.prompt.empty() && !o.prompt_ids.empty())
      return UsageError(
          "--prompt and --prompt-ids are alternatives: give the prompt as text or as token ids");
    if (!o.prompt.empty() && !is_text())
      return UsageError(StrFormat(
          "--prompt is text for the bytes tokenizer (vocab 257) or with --tokenizer-dir; this "
          "model's vocabulary is %d: give token ids with --prompt-ids, or the BPE tokenizer's "
          "folder with --tokenizer-dir",
          vocab_size_));
    if (hf_ != nullptr) {
      for (uint32_t t : hf_->EncodePrompt(o.prompt)) tokens->push_back(static_cast<int32_t>(t));
    } else if (sp_ != nullptr && !o.prompt.empty()) {  // BOS and the text, as the data has it
      std::vector<uint32_t> ids;
      sp_->BeginDocument("--prompt");
      TRAINER_RETURN_IF_ERROR(
          sp_->Encode(reinterpret_cast<const uint8_t*>(o.prompt.data()), o.prompt.size(), &ids));
      TRAINER_RETURN_IF_ERROR(sp_->EndDocument(&ids));
      tokens->assign(ids.begin(), ids.end());
    } else if (bpe_ != nullptr) {
      BpeTokenizer tokenizer(bpe_, eod_);
      for (uint32_t t : tokenizer.EncodeText(o.prompt)) tokens->push_back(static_cast<int32_t>(t));
    } else {
      for (unsigned char c : o.prompt) tokens->push_back(c);
    }
    std::istringstream ids(o.prompt_ids);
    std::string id;
    while (ids >> id) {
      char* end = nullptr;
      const long value = std::strtol(id.c_str(), &end, 10);
      if (*end != '\0' || value < 0 || value >= vocab_size_)
        return UsageError(
            StrFormat("--prompt-ids: '%s' is not a token id below the vocabulary size %d",
                      id.c_str(), vocab_size_));
      tokens->push_back(static_cast<int32_t>(value));
    }
    if (tokens->empty()) tokens->push_back(eod_);
    return CheckIds(*tokens);
  }

  // A token as printed: its text (an end of document as a blank line), or its id.
  void Print(int32_t token, std::ostream& out) const {
    if (!is_text())
      out << token << ' ';
    else if (token == eod_)
      out << "\n\n";
    else
      out << Text(token);
  }

  // The text of a token other than the end of document.
  std::string Text(int32_t token) const {
    if (hf_ != nullptr) return hf_->Decode(static_cast<uint32_t>(token));
    if (sp_ != nullptr) return sp_->Decode(static_cast<uint32_t>(token));
    if (bpe_ == nullptr) return std::string(1, static_cast<char>(token));
    if (token < bpe_->size()) return bpe_->TokenBytes(static_cast<uint32_t>(token));
    return StrFormat("[%d]", token);  // an id past the tokenizer's (the model's padding)
  }

 private:
  int vocab_size_ = 0;
  int32_t eod_ = 0;
  bool bytes_ = false;
  // A tokenizer's ids past the model's vocabulary: the tokenizer is another model's.
  Status CheckIds(const std::vector<int32_t>& tokens) const {
    for (int32_t t : tokens)
      if (t >= vocab_size_)
        return UsageError(StrFormat(
            "--tokenizer-dir: the prompt's token %d is past this model's vocabulary of %d: the "
            "folder holds another model's tokenizer. Give the one the data was packed with",
            t, vocab_size_));
    return Status::Ok();
  }

  std::shared_ptr<const BpeVocabulary> bpe_;
  std::unique_ptr<Tokenizer> model_tokenizer_;  // --tokenizer-dir's tokenizer.json or .model
  HfTokenizer* hf_ = nullptr;                   // it, where a tokenizer.json (encoding caches)
  SentencePieceTokenizer* sp_ = nullptr;        // it, where a tokenizer.model
  std::unique_ptr<Tokenizer> own_tokenizer_;  // --chat with bytes or GPT-2's BPE
};

// The sample onto `out`; *checkpoint: the checkpoint file it read (ResolveCheckpoint's).
Status Sample(const SampleOptions& o, RunContext* ctx, std::ostream& out, std::string* checkpoint) {
  if (o.tokens < 1) return UsageError(StrFormat("--tokens %d: give at least 1", o.tokens));
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))  // NaN fails every comparison
    return UsageError(
        StrFormat("--temperature %g: give a finite value of at least 0 (0 takes "
                  "the likeliest token)",
                  o.temperature));
  if (o.top_k < 0) return UsageError(StrFormat("--top-k %d: give at least 0 (0: all)", o.top_k));
  if (!o.chat && (!o.system.empty() || !o.chat_template.empty()))
    return UsageError(StrFormat("%s (sample) applies to --chat: add --chat, or leave it out",
                                o.system.empty() ? "--chat-template" : "--system"));
  TRAINER_RETURN_IF_ERROR(ResolveCheckpoint(o.checkpoint, "sample", checkpoint));
  const std::string& file = *checkpoint;
  // One sequence of max_seq_len tokens (Model.seq_len=0).
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("Model.seq_len=0");
  TRAINER_ASSIGN_OR_RETURN(const TrainConfig config, OneProcessConfig(file, overrides, 1));
  const ModelConfig& mc = config.model;
  TokenText token_text;
  TRAINER_RETURN_IF_ERROR(token_text.Setup(o, mc));
  std::vector<int32_t> context;
  std::string reply_end;
  if (o.chat)
    TRAINER_RETURN_IF_ERROR(token_text.ChatPrompt(o, &context, &reply_end));
  else
    TRAINER_RETURN_IF_ERROR(token_text.Prompt(o, &context));
  TRAINER_RETURN_IF_ERROR(ctx->SetupDevice(config));
  TRAINER_RETURN_IF_ERROR(ctx->BuildGroups(config));

  const int T = mc.max_seq_len;
  const ModelPartition part = MakePartition(mc, config.distributed, 0, 0);
  Backend* backend = ctx->backend.get();
  TRAINER_RETURN_IF_ERROR(backend->ReserveArena(
      GptModel::BufferBytes(mc, part, backend->compute_dtype(), 1, T, 1).total()));
  std::unique_ptr<GptModel> model;
  TRAINER_RETURN_IF_ERROR(GptModel::Create(mc, part, backend, ctx->groups.tp, 1, T, 1, &model));
  TRAINER_RETURN_IF_ERROR(LoadCheckpointWeights(file, config, model.get()));
  std::cerr << StrFormat("sampling %d tokens from %s (%d layers, hidden %d, context %d) on %s\n",
                         o.tokens, file.c_str(), mc.num_layers, mc.hidden_size, T,
                         backend->name().c_str())
            << CapacityNote(mc, "each token depends on the window it is drawn in");

  // Data.packing: documents: attention and positions stay inside each document, which starts
  // after an end of document; the model never learned a document's first token.
  const bool documents = config.data.packed_documents();
  if (documents && context.size() == 1 && context[0] == token_text.eod() && o.prompt.empty() &&
      o.prompt_ids.empty())
    return UsageError(
        "an empty prompt starts a new document, and with Data.packing=documents the model never "
        "learned a document's first token (that target is ignored): give --prompt or "
        "--prompt-ids");
  std::vector<int32_t> starts(documents ? T : 0);
  const auto emit = [&](int32_t token) { token_text.Print(token, out); };
  const bool echo_prompt = !o.chat && (!o.prompt.empty() || !o.prompt_ids.empty());
  ReplyStream reply(reply_end, &out);
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> window(T);
  std::vector<float> logits;
  for (int i = 0; i < o.tokens; ++i) {
    // The last T tokens at the window's start; the positions after them do not affect the
    // logits read (causal attention), so they keep whatever they hold.
    const size_t n = std::min<size_t>(context.size(), T);
    std::copy(context.end() - n, context.end(), window.begin());
    for (size_t t = 0, start = 0; t < starts.size(); ++t) {  // documents: where each one starts
      starts[t] = static_cast<int32_t>(start);
      if (t < n && window[t] == token_text.eod()) start = t + 1;
    }
    TRAINER_RETURN_IF_ERROR(model->SetDocumentStarts(0, documents ? starts.data() : nullptr));
    TRAINER_RETURN_IF_ERROR(model->Forward(0, window.data(), nullptr, false, 0.f));
    TRAINER_RETURN_IF_ERROR(model->LogitsRow(static_cast<int64_t>(n) - 1, &logits));
    const int32_t next = DrawToken(logits, o.temperature, o.top_k, &rng);
    // The prompt after the first forward: the GPU backend logs its first-use tuning then.
    if (i == 0 && echo_prompt)
      for (int32_t t : context) emit(t);
    context.push_back(next);
    if (o.chat) {
      if (next == token_text.eod() || !reply.Add(token_text.Text(next))) break;
      continue;
    }
    emit(next);
    out.flush();
  }
  reply.Finish();
  out << std::endl;
  return out ? Status::Ok()
             : EnvironmentError(StrFormat("cannot write the sample (%s)",
                                          o.output.empty() ? "stdout" : o.output.c_str()));
}

}  // namespace

int RunSampleCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer sample options");
  SampleOptions o;
  options.add_options()("prompt,p", po::value(&o.prompt)->default_value(""),
                        "text to continue (bytes tokenizer or --tokenizer-dir); empty: start a "
                        "new document")(
      "tokenizer-dir", po::value(&o.tokenizer_dir)->default_value(""),
      "the folder of the tokenizer the data was packed with (the model's tokenizer.json or "
      "SentencePiece tokenizer.model, or GPT-2's BPE files): text in and out")(
      "chat", po::bool_switch(&o.chat),
      "--prompt is a user's message: rendered with the chat template, the assistant's reply "
      "printed up to its end marker")("system", po::value(&o.system)->default_value(""),
                                      "--chat: a system message before the user's")(
      "chat-template", po::value(&o.chat_template)->default_value(""),
      "--chat: chatml, llama3 or none, as trainer pack --input-format chat packed the data "
      "(default as pack's: with a tokenizer.json llama3 for a Llama 3 one, else chatml; none "
      "with the others)")("prompt-ids", po::value(&o.prompt_ids)->default_value(""),
                          "token ids to continue, space-separated (any tokenizer)")(
      "tokens,n", po::value(&o.tokens)->default_value(256), "tokens to generate")(
      "temperature,t", po::value(&o.temperature)->default_value(1.0),
      "softmax temperature; 0 takes the likeliest token every time")(
      "top-k,k", po::value(&o.top_k)->default_value(0),
      "draw among the k likeliest tokens; 0: all")("seed", po::value(&o.seed)->default_value(1337),
                                                   "random seed of the draws")(
      "output", po::value(&o.output)->default_value(""), "write the sample here; empty: stdout");
  RunContext ctx;
  int exit_code = 0;
  if (!StartCheckpointCommand("sample",
                              "CHECKPOINT [--prompt TEXT [--chat [--system TEXT]]] [-n TOKENS] "
                              "[-t TEMPERATURE] [-k K]",
                              args, &options, &o.checkpoint, &o.overrides, &ctx, &exit_code))
    return exit_code;
  // --output: the sample goes to OUTPUT.tmp, renamed over OUTPUT once whole, so that a failed
  // run leaves an existing OUTPUT as it was.
  std::ofstream file;
  const std::string partial = o.output + ".tmp";
  if (!o.output.empty()) {
    file.open(partial);
    if (!file)
      return ctx.Finish(ctx.Agree(EnvironmentError(
          StrFormat("cannot write %s (--output): check the folder exists and is writable",
                    partial.c_str()))));
  }
  std::string checkpoint;  // the file read
  Status sampled = Sample(o, &ctx, o.output.empty() ? std::cout : file, &checkpoint);
  if (!o.output.empty()) {
    file.close();
    if (sampled.ok() && std::rename(partial.c_str(), o.output.c_str()) != 0)
      sampled = EnvironmentError(StrFormat("cannot rename %s to %s (--output): %s", partial.c_str(),
                                           o.output.c_str(), std::strerror(errno)));
    if (!sampled.ok()) std::remove(partial.c_str());
  }
  return ctx.Finish(
      ctx.Agree(ExplainRemovedCheckpoint(sampled, o.checkpoint, checkpoint, "sample")));
}

}  // namespace trainer
