// `trainer plan --config FILE [-o ...] --world-size N`: validate a config for a world size and
// estimate each pipeline stage's memory per rank (parameters, gradients, master weights, Adam
// moments, activations of the 1F1B slots, logits), without starting MPI or touching a GPU.
#include <iostream>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "common/log.h"
#include "config/config_loader.h"
#include "engine/pipeline.h"
#include "model/parameters.h"

namespace trainer {
namespace {

double GiB(double bytes) {
  return bytes / (1024.0 * 1024.0 * 1024.0);
}

// Bytes of the activations that one slot keeps for one block (see BlockActivations).
double BlockActivationBytes(const ModelConfig& m, int tp, int B, double compute_bytes) {
  const double N = static_cast<double>(B) * m.sequence_length(), C = m.hidden_size;
  const double Cl = C / tp, Fl = static_cast<double>(m.ffn_size()) / tp;
  const double heads = static_cast<double>(m.num_heads) / tp;
  const double compute = N * (C /*ln1*/ + 3 * Cl + Cl + C /*mid*/ + C /*ln2*/ + 2 * Fl + C);
  const double f32 = N * 4 /*ln stats*/ + heads * N /*attention stats*/;
  return compute * compute_bytes + f32 * 4;
}

}  // namespace

int RunPlanCommand(const std::vector<std::string>& args) {
  po::options_description options("trainer plan options");
  std::string config_path;
  std::vector<std::string> overrides;
  int world = 1;
  options.add_options()("config,c", po::value(&config_path)->default_value(""), "YAML config")(
      "override,o", po::value(&overrides)->composing(), "Section.key=value, repeatable")(
      "world-size,n", po::value(&world)->default_value(1), "number of ranks");
  po::variables_map vm;
  bool help = false;
  Status s = ParseCommandLine("plan", args, options, &vm, &help);
  if (s.ok() && help) {
    PrintCommandHelp("plan", "--config FILE [-o Section.key=value ...] --world-size N", options);
    return 0;
  }
  TrainConfig c;
  if (s.ok()) {
    auto loaded = LoadConfig(config_path, overrides);
    s = loaded.ok() ? ValidateConfig(&loaded.value(), world) : loaded.status();
    if (s.ok()) c = loaded.value();
  }
  if (!s.ok()) {
    LogError(s.message());
    return s.exit_code();
  }
  const bool gpu = c.global.device != "cpu";
  const double cb = gpu ? 2.0 : 4.0;  // compute dtype bytes (bf16 on GPU)
  const DistributedConfig& d = c.distributed;
  const int micro = c.gradient_accumulation_steps(), B = c.global.micro_batch_size;
  std::cout << StrFormat(
      "plan: %d ranks = dp %d x tp %d x pp %d; %d micro-batches of %d x %d "
      "tokens per rank per step; %s%s\n",
      world, d.dp_degree, d.tp_degree, d.pp_degree, micro, B, c.model.sequence_length(),
      gpu ? "bf16 compute, fp32 master/moments/grads" : "fp32 (CPU)",
      d.zero_stage1 && d.dp_degree > 1 ? "; ZeRO-1: master/moments split over dp" : "");
  for (int stage = 0; stage < d.pp_degree; ++stage) {
    const ModelPartition part = MakePartition(c.model, d, 0, stage);
    const double params =
        static_cast<double>(TotalLocalElements(BuildParameterList(c.model, part)));
    const int slots = PipelineStage::NumSlots(stage, d.pp_degree, micro);
    // Model.recompute: "gelu" shares the GELU output, "block" keeps one block output per layer
    // and slot plus one shared set.
    const double block = BlockActivationBytes(c.model, d.tp_degree, B, cb);
    const double rows = static_cast<double>(B) * c.model.sequence_length() * c.model.hidden_size /
                        (c.model.sequence_parallel ? d.tp_degree : 1);
    const double gelu =
        static_cast<double>(B) * c.model.sequence_length() * c.model.ffn_size() / d.tp_degree * cb;
    double act = slots * part.num_layers * block;
    if (c.model.recompute == "gelu") act = slots * part.num_layers * (block - gelu) + gelu;
    if (c.model.recompute == "block") act = slots * part.num_layers * rows * cb + block;
    const double logits = part.last_stage() ? static_cast<double>(B) * c.model.sequence_length() *
                                                  c.model.padded_vocab() / d.tp_degree * cb
                                            : 0.0;
    // Master weights and moments: 12 bytes per parameter, split over DP under ZeRO-1.
    const double state = params * (cb + 4 /*grad*/ + 12.0 / part.flat_shards);
    std::cout << StrFormat(
        "  stage %d: %d blocks, %.1fM parameters per rank | weights+grads+"
        "optimizer %.2f GiB | activations (%d slots) %.2f GiB | logits %.2f "
        "GiB | total ~%.2f GiB\n",
        stage, part.num_layers, params / 1e6, GiB(state), slots, GiB(act), GiB(logits),
        GiB(state + act + logits));
  }
  return 0;
}

}  // namespace trainer
