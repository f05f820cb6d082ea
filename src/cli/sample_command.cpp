// `trainer sample CHECKPOINT`: text from a trained model. One process loads the whole model (a
// checkpoint of any layout), with the config the checkpoint carries, on the CPU or the GPU
// (Global.device). The prompt fills the context; each new token is drawn from the last position's
// logits (softmax at --temperature over the --top-k likeliest; temperature 0 takes the likeliest),
// the window sliding once the context holds max_seq_len tokens. For the bytes tokenizer (vocab 257)
// the prompt and the output are text; otherwise token ids (--prompt-ids in, ids out).
#include <algorithm>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "cli/checkpoint_model.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/run_context.h"
#include "cli/token_draw.h"
#include "common/filesystem.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/parameters.h"

namespace trainer {
namespace {

struct SampleOptions {
  std::string checkpoint, prompt, prompt_ids, output;
  int tokens = 256, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 1337;
  std::vector<std::string> overrides;
};

// The prompt as tokens: the bytes of --prompt (bytes tokenizer), or --prompt-ids; empty: one
// end-of-document token (the start of a document).
Status PromptTokens(const SampleOptions& o, const ModelConfig& model, bool text,
                    std::vector<int32_t>* tokens) {
  tokens->clear();
  if (!o.prompt.empty() && !text)
    return UsageError(
        StrFormat("--prompt is text for the bytes tokenizer (vocab 257); this model's vocabulary "
                  "is %d: give token ids with --prompt-ids",
                  model.vocab_size));
  for (unsigned char c : o.prompt) tokens->push_back(c);
  std::istringstream ids(o.prompt_ids);
  std::string id;
  while (ids >> id) {
    char* end = nullptr;
    const long value = std::strtol(id.c_str(), &end, 10);
    if (*end != '\0' || value < 0 || value >= model.vocab_size)
      return UsageError(
          StrFormat("--prompt-ids: '%s' is not a token id below the vocabulary size %d", id.c_str(),
                    model.vocab_size));
    tokens->push_back(static_cast<int32_t>(value));
  }
  if (tokens->empty()) tokens->push_back(model.vocab_size - 1);  // eod: pack's last id
  return Status::Ok();
}

Status Sample(const SampleOptions& o, RunContext* ctx, std::ostream& out) {
  if (o.tokens < 1 || o.temperature < 0 || o.top_k < 0)
    return UsageError("--tokens must be at least 1, --temperature and --top-k at least 0");
  std::string file;
  TRAINER_RETURN_IF_ERROR(ResolveCheckpoint(o.checkpoint, "sample", &file));
  // One sequence of max_seq_len tokens (Model.seq_len=0).
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("Model.seq_len=0");
  TRAINER_ASSIGN_OR_RETURN(const TrainConfig config, OneProcessConfig(file, overrides, 1));
  const ModelConfig& mc = config.model;
  const bool text = mc.vocab_size == ByteTokenizer::kVocabSize;
  std::vector<int32_t> context;
  TRAINER_RETURN_IF_ERROR(PromptTokens(o, mc, text, &context));
  TRAINER_RETURN_IF_ERROR(ctx->SetupDevice(config));
  TRAINER_RETURN_IF_ERROR(ctx->BuildGroups(config));

  const int T = mc.max_seq_len;
  const ModelPartition part = MakePartition(mc, config.distributed, 0, 0);
  Backend* backend = ctx->backend.get();
  TRAINER_RETURN_IF_ERROR(backend->ReserveArena(GptModel::BufferBytes(mc, part, backend, 1, T, 1)));
  std::unique_ptr<GptModel> model;
  TRAINER_RETURN_IF_ERROR(GptModel::Create(mc, part, backend, ctx->groups.tp, 1, T, 1, &model));
  TRAINER_RETURN_IF_ERROR(LoadCheckpointWeights(file, mc, model.get()));
  std::cerr << StrFormat("sampling %d tokens from %s (%d layers, hidden %d, context %d) on %s\n",
                         o.tokens, file.c_str(), mc.num_layers, mc.hidden_size, T,
                         backend->name().c_str());

  const auto emit = [&](int32_t token) {
    if (!text)
      out << token << ' ';
    else if (token == ByteTokenizer::kEodId)
      out << "\n\n";  // the end of a document
    else
      out << static_cast<char>(token);
  };
  const bool echo_prompt = !o.prompt.empty() || !o.prompt_ids.empty();
  std::mt19937_64 rng(o.seed);
  std::vector<int32_t> window(T);
  std::vector<float> logits;
  for (int i = 0; i < o.tokens; ++i) {
    // The last T tokens at the window's start; the positions after them do not affect the
    // logits read (causal attention), so they keep whatever they hold.
    const size_t n = std::min<size_t>(context.size(), T);
    std::copy(context.end() - n, context.end(), window.begin());
    TRAINER_RETURN_IF_ERROR(model->Forward(0, window.data(), nullptr, false, 0.f));
    TRAINER_RETURN_IF_ERROR(model->LogitsRow(static_cast<int64_t>(n) - 1, &logits));
    const int32_t next = DrawToken(logits, o.temperature, o.top_k, &rng);
    // The prompt after the first forward: the GPU backend logs its first-use tuning then.
    if (i == 0 && echo_prompt)
      for (int32_t t : context) emit(t);
    context.push_back(next);
    emit(next);
    out.flush();
  }
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
                        "text to continue (bytes tokenizer); empty: start a new document")(
      "prompt-ids", po::value(&o.prompt_ids)->default_value(""),
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
                              "CHECKPOINT [--prompt TEXT] [-n TOKENS] [-t TEMPERATURE] [-k K]",
                              args, &options, &o.checkpoint, &o.overrides, &ctx, &exit_code))
    return exit_code;
  std::ofstream file;
  if (!o.output.empty()) {
    file.open(o.output);
    if (!file)
      return ctx.Finish(ctx.Agree(EnvironmentError(
          StrFormat("cannot write %s (--output): check the folder exists and is writable",
                    o.output.c_str()))));
  }
  return ctx.Finish(ctx.Agree(Sample(o, &ctx, o.output.empty() ? std::cout : file)));
}

}  // namespace trainer
