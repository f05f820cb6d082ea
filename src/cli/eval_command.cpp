// `trainer eval CHECKPOINT --data FILE`: the mean loss (and perplexity) of a checkpoint's model on
// a packed token file (or several, as Data.val_path names them). One process loads the whole model
// (a checkpoint of any layout) with the config the checkpoint carries, on the CPU or the GPU
// (Global.device), and runs the forward over the file's samples of Model.seq_len tokens in order, a
// micro-batch at a time: the samples a training run's evaluation reads from a validation file
// (Data.val_path), so that the two agree. It reads the checkpoint only: a run may go on writing to
// the folder meanwhile.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "cli/checkpoint_model.h"
#include "cli/cli_options.h"
#include "cli/commands.h"
#include "cli/run_context.h"
#include "common/log.h"
#include "data/data_sources.h"
#include "model/gpt.h"
#include "model/parameters.h"

namespace trainer {
namespace {

struct EvalOptions {
  std::string checkpoint, data;
  int batch = 0;      // sequences per forward; 0: the checkpoint's Global.micro_batch_size
  int64_t limit = 0;  // micro-batches evaluated; 0: every whole one in the file
  std::vector<std::string> overrides;
};

struct EvalResult {
  int64_t step = 0, batches = 0, samples_left = 0;
  int64_t targets = 0;  // the targets that count (all of them unless the data has a /loss_mask)
  int batch = 0, seq_len = 0;
  double loss = 0;  // mean over the targets
};

Status Evaluate(const EvalOptions& o, RunContext* ctx, std::string* file, EvalResult* r) {
  if (o.batch < 0 || o.limit < 0) return UsageError("--batch and --batches must be at least 0");
  TRAINER_RETURN_IF_ERROR(ResolveCheckpoint(o.checkpoint, "eval", file));
  TRAINER_ASSIGN_OR_RETURN(const TrainConfig config,
                           OneProcessConfig(*file, o.overrides, o.batch, &r->step));
  const ModelConfig& mc = config.model;
  const int B = config.global.micro_batch_size, T = mc.sequence_length();
  TRAINER_ASSIGN_OR_RETURN(const SampleSet data, OpenSampleSet(o.data, "--data", mc.vocab_size, T));
  const int64_t samples = data.num_samples();
  if (samples < B)
    return DataError(
        StrFormat("too few samples (%s, --data): %lld of %d+1 tokens, fewer than one "
                  "micro-batch of %d. Give a smaller -b or more data",
                  data.Describe().c_str(), static_cast<long long>(samples), T, B));
  r->batches = samples / B;
  if (o.limit > 0 && o.limit < r->batches) r->batches = o.limit;
  r->samples_left = samples - r->batches * B;
  r->batch = B;
  r->seq_len = T;

  TRAINER_RETURN_IF_ERROR(ctx->SetupDevice(config));
  TRAINER_RETURN_IF_ERROR(ctx->BuildGroups(config));
  const ModelPartition part = MakePartition(mc, config.distributed, 0, 0);
  Backend* backend = ctx->backend.get();
  TRAINER_RETURN_IF_ERROR(backend->ReserveArena(
      GptModel::BufferBytes(mc, part, backend->compute_dtype(), B, T, 1).total()));
  std::unique_ptr<GptModel> model;
  TRAINER_RETURN_IF_ERROR(GptModel::Create(mc, part, backend, ctx->groups.tp, B, T, 1, &model));
  TRAINER_RETURN_IF_ERROR(LoadCheckpointWeights(*file, config, model.get()));
  std::cerr << StrFormat("evaluating %s on %s: %lld micro-batches of %d x %d tokens on %s\n",
                         file->c_str(), data.Describe().c_str(), static_cast<long long>(r->batches),
                         B, T, backend->name().c_str());
  std::cerr << CapacityNote(mc, StrFormat("the loss depends on -b (%d here; training evaluates "
                                          "Global.micro_batch_size at a time)",
                                          B));
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  // Data.packing: documents (the checkpoint's, or -o): as training evaluates, inside documents.
  const bool documents = config.data.packed_documents();
  std::vector<int32_t> starts(documents ? inputs.size() : 0);
  if (documents) data.EnableDocumentStarts();
  std::vector<int64_t> ids(static_cast<size_t>(B));
  int64_t& counted = r->targets;
  counted = 0;
  for (int64_t b = 0; b < r->batches; ++b) {
    for (int j = 0; j < B; ++j) ids[static_cast<size_t>(j)] = b * B + j;
    TRAINER_RETURN_IF_ERROR(data.ReadSamples(ids, T, inputs.data(), targets.data(), {},
                                             documents ? starts.data() : nullptr));
    TRAINER_RETURN_IF_ERROR(model->SetDocumentStarts(0, documents ? starts.data() : nullptr));
    for (int32_t t : targets) counted += t >= 0;
    TRAINER_RETURN_IF_ERROR(model->Forward(0, inputs.data(), targets.data(), true, 0.f));
    TRAINER_RETURN_IF_ERROR(model->AccumulateLoss(b == 0));
  }
  if (counted == 0)  // a mean over nothing: no loss to report
    return DataError(StrFormat(
        "no target counts in the samples evaluated (%s, --data): its /loss_mask is 0 on every "
        "target of the %lld micro-batches read (prompts only?). Evaluate more of it (--batches "
        "0: every micro-batch), or data whose loss_mask keeps targets",
        data.Describe().c_str(), static_cast<long long>(r->batches)));
  double sum = 0;
  TRAINER_RETURN_IF_ERROR(model->LossSum(&sum));
  r->loss = sum / static_cast<double>(counted);
  return Status::Ok();
}

}  // namespace

int RunEvalCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer eval options");
  EvalOptions o;
  options.add_options()("data,d", po::value(&o.data)->default_value(""),
                        "packed token file(s) (trainer pack) whose samples are evaluated: a path, "
                        "or several as Data.val_path takes them (commas, glob patterns)")(
      "batch,b", po::value(&o.batch)->default_value(0),
      "sequences per forward; 0: the checkpoint's Global.micro_batch_size")(
      "batches", po::value(&o.limit)->default_value(0),
      "evaluate the first N micro-batches only; 0: every whole micro-batch in the file");
  RunContext ctx;
  int exit_code = 0;
  if (!StartCheckpointCommand("eval", "CHECKPOINT --data FILE [-b B] [--batches N] [-o ...]", args,
                              &options, &o.checkpoint, &o.overrides, &ctx, &exit_code))
    return exit_code;
  Status status = Status::Ok();
  if (o.data.empty())
    status = UsageError(
        "trainer eval needs a token file: trainer eval CHECKPOINT --data FILE (a file from "
        "trainer pack)");
  std::string file;
  EvalResult r;
  if (status.ok()) status = Evaluate(o, &ctx, &file, &r);
  if (status.ok()) {
    const int64_t tokens = r.batches * r.batch * r.seq_len;
    const std::string masked = r.targets == tokens ? ""
                                                   : StrFormat(" of which %lld count (loss_mask)",
                                                               static_cast<long long>(r.targets));
    std::cerr << StrFormat(
        "eval: loss %.4f, perplexity %.2f over %lld tokens%s (%lld samples of "
        "%d; %lld left over, fewer than a micro-batch or past --batches)\n",
        r.loss, std::exp(r.loss), static_cast<long long>(tokens), masked.c_str(),
        static_cast<long long>(r.batches * r.batch), r.seq_len,
        static_cast<long long>(r.samples_left));
    std::cout << StrFormat(
                     "{\"checkpoint\": %s, \"step\": %lld, \"data\": %s, \"tokens\": "
                     "%lld, \"targets\": %lld, \"loss\": %.6f, \"perplexity\": %.4f}",
                     JsonQuoted(file).c_str(), static_cast<long long>(r.step),
                     JsonQuoted(o.data).c_str(), static_cast<long long>(tokens),
                     static_cast<long long>(r.targets), r.loss, std::exp(r.loss))
              << std::endl;
  }
  return ctx.Finish(ctx.Agree(ExplainRemovedCheckpoint(status, o.checkpoint, file, "eval")));
}

}  // namespace trainer
