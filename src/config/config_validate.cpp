// ValidateConfig (see config_loader.h): value ranges and enumerations, then the model's shape
// against the parallel degrees and the world size, then the batch. Each violation is one
// UsageError line: `<key>=<value> <problem> (<where it was set>). <fix>`.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/log.h"
#include "config/config_checker.h"
#include "config/config_keys.h"
#include "config/config_loader.h"

namespace trainer {
namespace {

constexpr double kNoBound = std::numeric_limits<double>::infinity();

// Numeric keys and their valid range: min <= value (min < value when above_min), value < below.
struct RangeRule {
  const char* key;
  double min;
  bool above_min;
  double below;
};
const RangeRule kRangeRules[] = {
    {"Global.global_batch_size", 1, false, kNoBound},
    {"Global.micro_batch_size", 1, false, kNoBound},
    {"Model.vocab_size", 1, false, kNoBound},
    {"Model.vocab_pad_multiple", 1, false, kNoBound},
    {"Model.hidden_size", 1, false, kNoBound},
    {"Model.num_layers", 1, false, kMaxLayers + 1},
    {"Model.num_heads", 1, false, kNoBound},
    {"Model.ffn_hidden_size", 0, false, kNoBound},
    {"Model.max_seq_len", 1, false, kNoBound},
    {"Model.seq_len", 0, false, kNoBound},
    {"Model.loss_chunk_tokens", 0, false, kNoBound},
    {"Model.hidden_dropout", 0, false, 1},
    {"Model.attention_dropout", 0, false, 1},
    {"Model.num_kv_heads", 0, false, kNoBound},
    {"Model.head_dim", 0, false, kNoBound},
    {"Model.norm_eps", 0, true, kNoBound},
    {"Model.rope_theta", 0, true, kNoBound},
    {"Model.rope_factor", 0, true, kNoBound},
    {"Model.rope_low_freq_factor", 0, true, kNoBound},
    {"Model.rope_high_freq_factor", 0, true, kNoBound},
    {"Model.rope_original_max_positions", 1, false, kNoBound},
    {"Model.num_experts", 0, false, kNoBound},
    {"Model.moe_router_topk", 1, false, kNoBound},
    {"Model.moe_ffn_hidden_size", 0, false, kNoBound},
    {"Model.moe_shared_expert_intermediate_size", 0, false, kNoBound},
    {"Model.moe_layer_freq", 1, false, kNoBound},
    {"Model.moe_first_k_dense", 0, false, kNoBound},
    {"Model.moe_aux_loss_coeff", 0, false, kNoBound},
    {"Model.moe_z_loss_coeff", 0, false, kNoBound},
    {"Model.moe_expert_capacity_factor", 0, false, kNoBound},
    {"Model.moe_router_bias_update_rate", 0, false, kNoBound},
    {"Model.lora_rank", 0, false, kNoBound},
    {"Model.lora_alpha", 0, true, kNoBound},
    {"Model.lora_dropout", 0, false, 1},
    {"Distributed.dp_degree", 0, false, kNoBound},
    {"Distributed.tp_degree", 1, false, kNoBound},
    {"Distributed.pp_degree", 1, false, kNoBound},
    {"Distributed.ep_degree", 1, false, kNoBound},
    {"Distributed.sharding.sharding_degree", 1, false, kNoBound},
    {"Distributed.sharding.sharding_stage", 1, false, kNoBound},
    {"Engine.max_steps", 1, false, kNoBound},
    {"Engine.logging_freq", 1, false, kNoBound},
    {"Engine.eval_freq", 0, false, kNoBound},
    {"Engine.eval_iters", 1, false, kNoBound},
    {"Engine.save_steps", 0, false, kNoBound},
    {"Engine.peak_tflops", 0, true, kNoBound},
    {"Engine.watchdog_s", 0, false, kNoBound},
    {"Engine.exit_duration_min", 0, false, kNoBound},
    {"Optimizer.lr", 0, false, kNoBound},
    {"Optimizer.min_lr", 0, false, kNoBound},
    {"Optimizer.warmup_steps", 0, false, kNoBound},
    {"Optimizer.decay_steps", 0, false, kNoBound},
    {"Optimizer.weight_decay", 0, false, kNoBound},
    {"Optimizer.beta1", 0, false, 1},
    {"Optimizer.beta2", 0, false, 1},
    {"Optimizer.eps", 0, true, kNoBound},
    {"Optimizer.grad_clip", 0, false, kNoBound},
    {"Data.val_fraction", 0, false, 1},
    {"Checkpoint.keep_last", 0, false, kNoBound},
    {"Checkpoint.keep_every", 0, false, kNoBound},
};

// String keys with a fixed set of values.
struct ChoiceRule {
  const char* key;
  std::vector<std::string> choices;
};
const ChoiceRule kChoiceRules[] = {
    {"Global.device", {"auto", "cpu", "cuda"}},
    {"Model.arch", {"gpt2", "llama"}},
    {"Model.rope_scaling", {"none", "llama3"}},
    {"Model.qk_norm_type", {"head", "full"}},
    {"Model.recompute", {"none", "gelu", "selective", "block"}},
    {"Data.packing", {"concat", "documents", "padding_free"}},
    {"Model.moe_router_score_function", {"softmax", "sigmoid"}},
    {"Model.moe_router_load_balancing_type", {"aux_loss", "seq_aux_loss"}},
    {"Engine.mix_precision", {"bf16", "fp32"}},
    {"Distributed.gpu_collectives", {"nccl", "mpi"}},
    {"Optimizer.decay_style", {"cosine", "linear", "constant"}},
};

// String keys that must not be empty, and how to fill them.
struct RequiredRule {
  const char* key;
  const char* fix;
};
const RequiredRule kRequiredRules[] = {
    {"Data.train_path",
     "Set it to a packed HDF5 dataset (trainer pack makes one), e.g. -o "
     "Data.train_path=data/demo.h5"},
    {"Engine.output_dir", "Set it to a folder for metrics and checkpoints, e.g. out/run1"},
};

double NumericValue(const FieldRef& field) {
  if (auto* v = std::get_if<int*>(&field)) return **v;
  if (auto* v = std::get_if<double*>(&field)) return **v;
  if (auto* v = std::get_if<uint64_t*>(&field)) return static_cast<double>(**v);
  return 0;
}

Status CheckRanges(Checker& check) {
  for (const RangeRule& rule : kRangeRules) {
    const FieldRef* field = check.Field(rule.key);
    TRAINER_ASSERT(field != nullptr, std::string("no such config key ") + rule.key);
    double value = NumericValue(*field);
    bool ok = (rule.above_min ? value > rule.min : value >= rule.min) && value < rule.below;
    if (ok) continue;
    const std::string key = rule.key;
    // Past the upper bound, or a fraction's [0, 1): the range; below the minimum: the minimum.
    const bool above_range = value >= rule.below && value >= rule.min;
    if (rule.below != kNoBound && (above_range || rule.below <= 1)) {
      std::string range = StrFormat("[%g, %g)", rule.min, rule.below);
      return check.Fail(check.Show(key) + " must be in " + range, {key},
                        "Set " + key + " to a value in " + range);
    }
    if (rule.above_min) {
      return check.Fail(check.Show(key) + StrFormat(" must be > %g", rule.min), {key},
                        "Set " + key + StrFormat(" to a value above %g", rule.min));
    }
    return check.Fail(check.Show(key) + StrFormat(" must be >= %g", rule.min), {key},
                      "Set " + key + StrFormat(" to %g or more", rule.min));
  }
  return Status::Ok();
}

Status CheckStrings(Checker& check) {
  for (const ChoiceRule& rule : kChoiceRules) {
    const FieldRef* field = check.Field(rule.key);
    TRAINER_ASSERT(field != nullptr && std::holds_alternative<std::string*>(*field),
                   std::string("no string config key ") + rule.key);
    const std::string& value = *std::get<std::string*>(*field);
    bool ok = false;
    for (const std::string& choice : rule.choices) ok = ok || value == choice;
    if (!ok) {
      return check.Fail(check.Show(rule.key) + " must be one of " + Join(rule.choices), {rule.key},
                        std::string("Set ") + rule.key + " to one of them");
    }
  }
  for (const RequiredRule& rule : kRequiredRules) {
    const FieldRef* field = check.Field(rule.key);
    TRAINER_ASSERT(field != nullptr && std::holds_alternative<std::string*>(*field),
                   std::string("no string config key ") + rule.key);
    if (std::get<std::string*>(*field)->empty())
      return check.Fail(std::string(rule.key) + " is empty", {rule.key}, rule.fix);
  }
  return Status::Ok();
}

// Distributed.zero_stage1 is the old spelling of sharding over every data rank at stage 1:
// rewritten into the sharding keys once the data ranks are known (the resolved config shows them).
// dp_given: the config set dp_degree (not derived), so a suggested sharding degree names the
// dp_degree that goes with it.
Status ResolveZeroStage1Alias(TrainConfig* c, Checker& check, bool dp_given) {
  DistributedConfig& d = c->distributed;
  if (!d.zero_stage1) return Status::Ok();
  // The keys that shard over `degree` ranks, keeping `replicas` (a given dp_degree follows).
  const auto sharding_keys = [&](int degree, int replicas) {
    return StrFormat("Distributed.zero_stage1=false and Distributed.sharding.sharding_degree=%d%s",
                     degree,
                     dp_given ? StrFormat(" with Distributed.dp_degree=%d", replicas).c_str() : "");
  };
  if (d.sharding.sharding_degree > 1)
    return check.Fail("Distributed.zero_stage1=true and " +
                          check.Show("Distributed.sharding.sharding_degree") +
                          " both shard the optimizer state",
                      {"Distributed.zero_stage1", "Distributed.sharding.sharding_degree"},
                      "Keep the sharding keys and set Distributed.zero_stage1=false");
  if (d.sharding.sharding_stage != 1)  // the alias is stage 1: another one asked for is refused
    return check.Fail(
        "Distributed.zero_stage1=true shards at stage 1, and " +
            check.Show("Distributed.sharding.sharding_stage") + " asks for another",
        {"Distributed.zero_stage1", "Distributed.sharding.sharding_stage"},
        StrFormat("Set %s to shard over every data rank at stage %d, or drop sharding_stage",
                  sharding_keys(d.dp_degree, 1).c_str(), d.sharding.sharding_stage));
  if (d.ep_degree > 1) {  // EP splits the experts over replicas, and the alias leaves one
    const bool even = d.dp_degree % d.ep_degree == 0;
    return check.Fail(
        StrFormat("Distributed.zero_stage1=true shards over all %d data-parallel ranks, leaving "
                  "one replica, and Distributed.ep_degree=%d splits the experts over replicas",
                  d.dp_degree, d.ep_degree),
        {"Distributed.zero_stage1", "Distributed.ep_degree"},
        even ? StrFormat("Set %s (%d replicas for the experts), or Distributed.ep_degree=1",
                         sharding_keys(d.dp_degree / d.ep_degree, d.ep_degree).c_str(), d.ep_degree)
             : std::string("Set Distributed.zero_stage1=false and shard with "
                           "Distributed.sharding.sharding_degree, or Distributed.ep_degree=1"));
  }
  d.sharding.sharding_degree = d.dp_degree;
  d.sharding.sharding_stage = 1;
  d.dp_degree = 1;
  d.zero_stage1 = false;
  c->notices.push_back(StrFormat(
      "Distributed.zero_stage1=true is an alias: sharding over all %d data-parallel ranks at "
      "stage 1 (Distributed.sharding.sharding_degree=%d, sharding_stage=1, dp_degree=1)",
      d.sharding.sharding_degree, d.sharding.sharding_degree));
  return Status::Ok();
}

// dp_degree (derived when 0) * sharding_degree * tp_degree * pp_degree must be the world size.
Status CheckWorld(TrainConfig* c, Checker& check) {
  DistributedConfig& d = c->distributed;
  // Each degree divides the ranks: one above the world size can never fit (and four such could
  // overflow their product).
  for (const auto& [key, degree] :
       {std::pair<const char*, int>{"Distributed.dp_degree", d.dp_degree},
        {"Distributed.tp_degree", d.tp_degree},
        {"Distributed.pp_degree", d.pp_degree},
        {"Distributed.sharding.sharding_degree", d.sharding.sharding_degree}})
    if (degree > c->world_size)
      return check.Fail(
          StrFormat("%s exceeds the world size %d", check.Show(key).c_str(), c->world_size), {key},
          StrFormat("Launch at least %d ranks, or set %s to at most %d", degree, key,
                    c->world_size));
  const auto times = [](long long a, long long b) {  // saturating: a product above any world
    long long product = 0;
    return __builtin_mul_overflow(a, b, &product) ? LLONG_MAX : product;
  };
  const long long model_ranks = times(times(d.tp_degree, d.pp_degree), d.sharding.sharding_degree);
  const std::initializer_list<std::string> keys = {"Distributed.dp_degree", "Distributed.tp_degree",
                                                   "Distributed.pp_degree",
                                                   "Distributed.sharding.sharding_degree"};
  // The sharding degree is named only where it is set (> 1).
  const bool sharded = d.sharding.sharding_degree > 1;
  const std::string sd_name = sharded ? "*sharding.sharding_degree" : "";
  const std::string sd_value = sharded ? StrFormat("*%d", d.sharding.sharding_degree) : "";
  if (d.dp_degree == 0) {
    if (c->world_size % model_ranks != 0) {
      return check.Fail(
          StrFormat("world size %d is not divisible by Distributed.tp_degree*pp_degree%s=%d*%d%s="
                    "%lld, so dp_degree cannot be derived",
                    c->world_size, sd_name.c_str(), d.tp_degree, d.pp_degree, sd_value.c_str(),
                    model_ranks),
          keys,
          StrFormat("Launch a multiple of %lld ranks, or change Distributed.tp_degree%s so "
                    "that their product divides %d",
                    model_ranks,
                    sharded ? ", pp_degree and sharding.sharding_degree" : " and pp_degree",
                    c->world_size));
    }
    d.dp_degree = static_cast<int>(c->world_size / model_ranks);
    return ResolveZeroStage1Alias(c, check, false);
  }
  const long long product = times(model_ranks, d.dp_degree);
  if (product == c->world_size) return ResolveZeroStage1Alias(c, check, true);
  std::string what = StrFormat(
      "Distributed.dp_degree%s*tp_degree*pp_degree=%d%s*%d*%d=%lld does not match the world "
      "size %d",
      sd_name.c_str(), d.dp_degree, sd_value.c_str(), d.tp_degree, d.pp_degree, product,
      c->world_size);
  if (c->world_size % model_ranks == 0) {
    return check.Fail(what, keys,
                      StrFormat("Set Distributed.dp_degree to %lld (or 0 to derive it), or launch "
                                "%lld ranks",
                                c->world_size / model_ranks, product));
  }
  return check.Fail(what, keys,
                    StrFormat("Launch %lld ranks, or change the degrees so that their product "
                              "is %d",
                              product, c->world_size));
}

// `shown`=value must be a multiple of Distributed.tp_degree.
Status CheckSplitByTp(const TrainConfig& c, Checker& check, const std::string& key,
                      const std::string& shown, int value) {
  const int tp = c.distributed.tp_degree;
  if (value % tp == 0) return Status::Ok();
  return check.Fail(shown + " is not divisible by " + check.Show("Distributed.tp_degree"),
                    {key, "Distributed.tp_degree"},
                    StrFormat("Set Distributed.tp_degree to a divisor of %d, or set %s to a "
                              "multiple of %d",
                              value, key.c_str(), tp));
}

// Combinations of the sharding keys that cannot run.
Status CheckSharding(const TrainConfig& c, Checker& check) {
  const DistributedConfig& d = c.distributed;
  const ShardingConfig& s = d.sharding;
  if (s.sharding_stage > 3)
    return check.Fail(check.Show("Distributed.sharding.sharding_stage") +
                          " is not a ZeRO stage (1: optimizer state, 2: + gradients, 3: + "
                          "parameters)",
                      {"Distributed.sharding.sharding_stage"},
                      "Set Distributed.sharding.sharding_stage to 1, 2 or 3");
  if (s.sharding_degree > 1 && d.overlap_grad_reduce)
    return check.Fail(
        check.Show("Distributed.sharding.sharding_degree") +
            " and Distributed.overlap_grad_reduce=true: sharded gradients are reduce-scattered, "
            "not all-reduced (stages 2 and 3 overlap that with the backward pass themselves)",
        {"Distributed.sharding.sharding_degree", "Distributed.overlap_grad_reduce"},
        "Set Distributed.overlap_grad_reduce=false (use sharding_stage 2 for overlap)");
  return Status::Ok();
}

// Expert parallelism: experts to split, evenly, over the replicas (dp_degree), so that the members
// of a sharding group hold the same experts and shard their state at any stage.
Status CheckExpertParallel(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  const DistributedConfig& d = c.distributed;
  if (d.ep_degree <= 1) return Status::Ok();
  if (d.dp_degree % d.ep_degree != 0) {
    std::string fix =
        StrFormat("Set Distributed.ep_degree to a divisor of %d (1 unless the model has experts)",
                  d.dp_degree);
    // The data ranks held by sharding instead: as many as keep the expert groups whole moved
    // to dp_degree (the largest sharding degree left that allows it).
    const int data_ranks = d.data_parallel_size();
    for (int sharding = d.sharding.sharding_degree / 2; sharding >= 1; --sharding)
      if (d.sharding.sharding_degree % sharding == 0 &&
          (data_ranks / sharding) % d.ep_degree == 0) {
        fix += StrFormat(
            ", or keep it and set Distributed.sharding.sharding_degree=%d (dp_degree becomes %d: "
            "the expert groups are carved out of the replicas, not the sharding ranks)",
            sharding, data_ranks / sharding);
        break;
      }
    return check.Fail(check.Show("Distributed.ep_degree") +
                          StrFormat(" does not divide dp_degree=%d", d.dp_degree),
                      {"Distributed.ep_degree", "Distributed.dp_degree"}, fix);
  }
  if (!m.moe())
    return check.Fail(check.Show("Distributed.ep_degree") +
                          " splits the experts of MoE layers, but the model has none "
                          "(Model.num_experts=0)",
                      {"Distributed.ep_degree", "Model.num_experts"},
                      "Set Distributed.ep_degree to 1, or give the model experts");
  if (m.num_experts % d.ep_degree != 0)
    return check.Fail(
        StrFormat("the %d experts (Model.num_experts) are not divisible by ", m.num_experts) +
            check.Show("Distributed.ep_degree"),
        {"Model.num_experts", "Distributed.ep_degree"},
        "Set Distributed.ep_degree to a divisor of " + std::to_string(m.num_experts) +
            " that divides dp_degree");
  if (c.global.device == "cuda" && !d.host_staged())
    return check.Fail(check.Show("Distributed.ep_degree") +
                          ": expert parallelism on GPUs runs over host-staged collectives in "
                          "this version (NCCL's all-to-all is not validated on several GPUs yet)",
                      {"Distributed.ep_degree", "Global.device"},
                      "Set Distributed.gpu_collectives=mpi, Global.device=cpu, or ep_degree=1 "
                      "with data parallelism on GPUs");
  return Status::Ok();
}

// How the model is split over the tensor-, pipeline- and expert-parallel groups.
Status CheckParallelLayout(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  const DistributedConfig& d = c.distributed;
  TRAINER_RETURN_IF_ERROR(CheckExpertParallel(c, check));
  TRAINER_RETURN_IF_ERROR(CheckSharding(c, check));
  // hidden_size first: with num_heads | hidden_size, tp | num_heads would imply tp | hidden_size.
  TRAINER_RETURN_IF_ERROR(CheckSplitByTp(c, check, "Model.hidden_size",
                                         check.Show("Model.hidden_size"), m.hidden_size));
  TRAINER_RETURN_IF_ERROR(
      CheckSplitByTp(c, check, "Model.num_heads", check.Show("Model.num_heads"), m.num_heads));
  if (m.kv_heads() % d.tp_degree != 0)  // kv heads are split, never replicated, over TP
    return check.Fail(
        StrFormat("the %d key/value heads (Model.num_kv_heads) are not divisible by ",
                  m.kv_heads()) +
            check.Show("Distributed.tp_degree"),
        {"Model.num_kv_heads", "Distributed.tp_degree"},
        StrFormat("Set Distributed.tp_degree to a divisor of %d (each TP rank holds whole "
                  "key/value heads)",
                  m.kv_heads()));
  TRAINER_RETURN_IF_ERROR(CheckSplitByTp(
      c, check, "Model.ffn_hidden_size",
      m.ffn_hidden_size > 0 ? check.Show("Model.ffn_hidden_size")
                            : StrFormat("ffn size 4*Model.hidden_size=%d", m.ffn_size()),
      m.ffn_size()));
  if (m.padded_vocab() % d.tp_degree != 0) {
    long long multiple = std::lcm(static_cast<long long>(m.vocab_pad_multiple), d.tp_degree);
    return check.Fail(
        StrFormat("padded vocabulary %d (Model.vocab_size=%d rounded up to a multiple of "
                  "Model.vocab_pad_multiple=%d) is not divisible by Distributed.tp_degree=%d",
                  m.padded_vocab(), m.vocab_size, m.vocab_pad_multiple, d.tp_degree),
        {"Model.vocab_pad_multiple", "Model.vocab_size", "Distributed.tp_degree"},
        StrFormat("Set Model.vocab_pad_multiple to a multiple of %d, e.g. %lld", d.tp_degree,
                  multiple));
  }
  if (m.sequence_parallel && m.sequence_length() % d.tp_degree != 0) {
    return check.Fail(
        StrFormat("Model.sequence_parallel=true needs the sequence length %d to be divisible by "
                  "Distributed.tp_degree=%d",
                  m.sequence_length(), d.tp_degree),
        {"Model.sequence_parallel", "Model.seq_len", "Model.max_seq_len", "Distributed.tp_degree"},
        StrFormat("Set Model.seq_len to a multiple of %d, or Model.sequence_parallel to false",
                  d.tp_degree));
  }
  if (d.pp_degree > m.num_layers) {
    return check.Fail(
        check.Show("Distributed.pp_degree") + " exceeds " + check.Show("Model.num_layers"),
        {"Distributed.pp_degree", "Model.num_layers"},
        StrFormat("Set Distributed.pp_degree to at most %d: every stage needs at least one layer",
                  m.num_layers));
  }
  if (d.pp_layers.empty()) return Status::Ok();
  const std::initializer_list<std::string> keys = {"Distributed.pp_layers", "Distributed.pp_degree",
                                                   "Model.num_layers"};
  if (static_cast<int>(d.pp_layers.size()) != d.pp_degree) {
    return check.Fail(
        check.Show("Distributed.pp_layers") +
            StrFormat(" has %zu %s but Distributed.pp_degree=%d", d.pp_layers.size(),
                      d.pp_layers.size() == 1 ? "entry" : "entries", d.pp_degree),
        keys,
        StrFormat("Give one layer count per stage (%d entries), or leave Distributed.pp_layers "
                  "empty for a balanced split",
                  d.pp_degree));
  }
  long long sum = 0;
  for (size_t stage = 0; stage < d.pp_layers.size(); ++stage) {
    if (d.pp_layers[stage] < 1) {
      return check.Fail(check.Show("Distributed.pp_layers") +
                            StrFormat(" gives stage %zu %d layers", stage, d.pp_layers[stage]),
                        keys, "Give every stage at least 1 layer");
    }
    sum += d.pp_layers[stage];
  }
  if (sum != m.num_layers) {
    return check.Fail(check.Show("Distributed.pp_layers") +
                          StrFormat(" sums to %lld but Model.num_layers=%d", sum, m.num_layers),
                      keys, StrFormat("Make the layer counts add up to %d", m.num_layers));
  }
  return Status::Ok();
}

Status CheckBatchAndSchedule(const TrainConfig& c, Checker& check) {
  const GlobalConfig& g = c.global;
  const int data_ranks = c.distributed.data_parallel_size();
  const long long per_step = static_cast<long long>(g.micro_batch_size) * data_ranks;
  if (g.global_batch_size % per_step != 0) {
    return check.Fail(
        StrFormat("Global.global_batch_size=%d is not divisible by micro_batch_size*dp_degree"
                  "%s=%d*%d=%lld",
                  g.global_batch_size,
                  c.distributed.sharding.sharding_degree > 1 ? "*sharding_degree" : "",
                  g.micro_batch_size, data_ranks, per_step),
        {"Global.global_batch_size", "Global.micro_batch_size", "Distributed.dp_degree"},
        StrFormat("Set global_batch_size to a multiple of %lld", per_step));
  }
  if (c.optimizer.min_lr > c.optimizer.lr && c.optimizer.decay_style != "constant") {
    return check.Fail(check.Show("Optimizer.min_lr") + " exceeds " + check.Show("Optimizer.lr"),
                      {"Optimizer.min_lr", "Optimizer.lr"},
                      "Set Optimizer.min_lr to at most " + check.Value("Optimizer.lr"));
  }
  return Status::Ok();
}

// Sizes that the model's buffers and kernels multiply out: the tokens of a micro-batch are the
// rows of its matrix products (32-bit dimensions in cuBLAS and in the model's row counts), and the
// elements of the largest activation and of all the parameters are counted in 64-bit integers.
Status CheckSizes(const TrainConfig& c, Checker& check) {
  const ModelConfig& m = c.model;
  if (m.padded_vocab64() > std::numeric_limits<int32_t>::max())
    return check.Fail(
        StrFormat("padded vocabulary %lld (Model.vocab_size=%d rounded up to a multiple of "
                  "Model.vocab_pad_multiple=%d) is more than 2147483647",
                  static_cast<long long>(m.padded_vocab64()), m.vocab_size, m.vocab_pad_multiple),
        {"Model.vocab_size", "Model.vocab_pad_multiple"},
        "Set Model.vocab_size to the tokenizer's vocabulary and Model.vocab_pad_multiple to a "
        "small power of two, e.g. 128");
  const long double T = m.sequence_length(), C = m.hidden_size, F = m.ffn_size(),
                    V = m.padded_vocab(), L = m.num_layers;
  const long double tokens = T * c.global.micro_batch_size;
  constexpr long double kMaxRows = std::numeric_limits<int32_t>::max();
  if (tokens > kMaxRows)
    return check.Fail(
        StrFormat("Global.micro_batch_size=%d x sequence length %d = %.0Lf tokens per "
                  "micro-batch, more than %.0Lf (the rows of one matrix product)",
                  c.global.micro_batch_size, m.sequence_length(), tokens, kMaxRows),
        {"Global.micro_batch_size", "Model.seq_len", "Model.max_seq_len"},
        StrFormat("Set Global.micro_batch_size to at most %lld (with Global.global_batch_size a "
                  "multiple of it times the DP size)",
                  static_cast<long long>(kMaxRows / T)));
  constexpr long double kMaxElements = 1ull << 50;  // 4 PiB of fp32: beyond any machine
  // Bounds (every layer counted with experts where there are any): the attention's heads of
  // head_dim, each expert's and the shared expert's SwiGLU, the chosen experts' activations.
  const long double Q = static_cast<long double>(m.num_heads) * m.head_size(), E = m.num_experts,
                    Fe = m.moe() ? m.moe_ffn_size() : 0, S = m.moe_shared_expert_intermediate_size;
  const long double widest =
      tokens * std::max({3 * std::max(C, Q), F, V, m.moe_router_topk * 2 * Fe});
  const long double parameters =
      (V + m.max_seq_len) * C +
      L * (4 * C * std::max(C, Q) + 3 * C * F + 9 * C + F + E * (3 * C * Fe + C) + 3 * C * S);
  if (widest > kMaxElements || parameters > kMaxElements)
    return check.Fail(
        StrFormat(
            "the model's sizes overflow: %.3Lg parameters and %.3Lg elements in its largest "
            "activation, more than 2^50 (4 PiB in fp32) by Model.hidden_size=%d, "
            "num_layers=%d, ffn size %d, padded vocabulary %d%s and %.0Lf tokens per "
            "micro-batch",
            parameters, widest, m.hidden_size, m.num_layers, m.ffn_size(), m.padded_vocab(),
            m.moe() ? StrFormat(", %d experts of %d", m.num_experts, m.moe_ffn_size()).c_str() : "",
            tokens),
        {"Model.hidden_size", "Model.num_layers", "Model.ffn_hidden_size", "Model.vocab_size",
         "Model.num_experts", "Global.micro_batch_size"},
        "Set the Model keys and Global.micro_batch_size to a model that a machine can hold");
  return Status::Ok();
}

}  // namespace

Status ValidateConfig(TrainConfig* config, int world_size) {
  if (world_size < 1)
    return UsageError(
        StrFormat("world size %d (launcher): a run has at least one rank. Start "
                  "one or more ranks",
                  world_size));
  config->world_size = world_size;
  Checker check(config);
  TRAINER_RETURN_IF_ERROR(CheckRanges(check));
  TRAINER_RETURN_IF_ERROR(CheckStrings(check));
  TRAINER_RETURN_IF_ERROR(CheckModel(*config, check));
  TRAINER_RETURN_IF_ERROR(CheckSizes(*config, check));
  TRAINER_RETURN_IF_ERROR(CheckWorld(config, check));
  TRAINER_RETURN_IF_ERROR(CheckParallelLayout(*config, check));
  return CheckBatchAndSchedule(*config, check);
}

}  // namespace trainer
