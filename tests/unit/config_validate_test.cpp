// Tests for ValidateConfig (one failing case per rule, asserting kUsage and the message's key and
// fix) and for the shipped configs under configs/ (each loads and validates on its world size).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config_loader.h"
#include "config_test_util.h"

namespace trainer {
namespace {

using namespace config_testing;

// ---------------------------------------------------------------- validation

TEST(ConfigValidate, DerivesDataParallelDegree) {
  StatusOr<TrainConfig> config = LoadConfig(
      "", {"Data.train_path=a.h5", "Distributed.tp_degree=2", "Global.global_batch_size=16"});
  ASSERT_TRUE(config.ok());
  Status status = ValidateConfig(&config.value(), 8);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(config->world_size, 8);
  EXPECT_EQ(config->distributed.dp_degree, 4);
  EXPECT_EQ(config->gradient_accumulation_steps(), 2);  // 16 / (2 * 4)
  // Expert parallelism needs experts.
  ExpectUsageError(ValidateWith({"Distributed.ep_degree=2", "Global.global_batch_size=8"}, 4),
                   {"Distributed.ep_degree=2 splits the experts of MoE layers",
                    "Set Distributed.ep_degree to 1"});
  ExpectUsageError(
      ValidateWith({"Distributed.zero_stage1=true", "Distributed.overlap_grad_reduce=true",
                    "Global.global_batch_size=8"},
                   2),
      {"Distributed.sharding.sharding_degree=2 and Distributed.overlap_grad_reduce=true",
       "Set Distributed.overlap_grad_reduce=false"});
}

// Defaults plus a training file, then `overrides`, validated for `world_size`; the config.
StatusOr<TrainConfig> Validated(std::vector<std::string> overrides, int world_size) {
  overrides.insert(overrides.begin(), "Data.train_path=train.h5");
  StatusOr<TrainConfig> config = LoadConfig("", overrides);
  if (!config.ok()) return config.status();
  TRAINER_RETURN_IF_ERROR(ValidateConfig(&config.value(), world_size));
  return config;
}

TEST(ConfigValidate, ShardingKeysAndTheZeroStage1Alias) {
  // dp x sharding x tp x pp = world; the batch counts sharding ranks as data ranks.
  auto config = Validated({"Distributed.sharding.sharding_degree=2", "Distributed.tp_degree=2",
                           "Global.global_batch_size=16"},
                          8);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->distributed.dp_degree, 2);
  EXPECT_EQ(config->distributed.data_parallel_size(), 4);
  EXPECT_EQ(config->distributed.zero_stage(), 1);
  EXPECT_EQ(config->gradient_accumulation_steps(), 2);  // 16 / (2 * 4)
  EXPECT_TRUE(config->notices.empty());
  // zero_stage1 becomes sharding over every data rank at stage 1, and says so once.
  config = Validated({"Distributed.zero_stage1=true", "Global.global_batch_size=8"}, 4);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_FALSE(config->distributed.zero_stage1);
  EXPECT_EQ(config->distributed.dp_degree, 1);
  EXPECT_EQ(config->distributed.sharding.sharding_degree, 4);
  EXPECT_EQ(config->distributed.zero_stage(), 1);
  ASSERT_EQ(config->notices.size(), 1u);
  EXPECT_NE(config->notices[0].find("alias"), std::string::npos);
  ExpectUsageError(
      ValidateWith({"Distributed.zero_stage1=true", "Distributed.sharding.sharding_degree=2"}, 2),
      {"Distributed.zero_stage1=true and Distributed.sharding.sharding_degree=2",
       "Distributed.zero_stage1=false"});
  ExpectUsageError(ValidateWith({"Distributed.sharding.sharding_degree=3"}, 4),
                   {"world size 4 is not divisible by Distributed.tp_degree*pp_degree*sharding."
                    "sharding_degree=1*1*3=3"});
  ExpectUsageError(
      ValidateWith({"Distributed.sharding.sharding_degree=2", "Distributed.dp_degree=1"}, 4),
      {"dp_degree*sharding.sharding_degree*tp_degree*pp_degree=1*2*1*1=2", "world size 4"});
  ExpectUsageError(
      ValidateWith(
          {"Distributed.sharding.sharding_degree=2", "Distributed.sharding.sharding_stage=4"}, 2),
      {"Distributed.sharding.sharding_stage=4 is not a ZeRO stage", "1, 2 or 3"});
  // Stage 3 composes with pipeline parallelism (sharding_layouts.sh trains it).
  EXPECT_TRUE(ValidateWith({"Distributed.sharding.sharding_degree=2",
                            "Distributed.sharding.sharding_stage=3", "Distributed.pp_degree=2",
                            "Model.num_layers=2"},
                           4)
                  .ok());
  ExpectUsageError(
      ValidateWith({"Distributed.sharding.sharding_degree=2", "Global.global_batch_size=6"}, 2),
      {"micro_batch_size*dp_degree*sharding_degree=2*2=4"});
}

// Model.lora_targets names linears of the family; Model.lora_dropout in [0, 1).
TEST(ConfigValidate, LoraKeys) {
  EXPECT_TRUE(
      ValidateWith({"Model.arch=llama", "Model.lora_rank=8", "Model.lora_targets=q_proj, v"}, 1)
          .ok());
  ExpectUsageError(
      ValidateWith({"Model.lora_rank=8", "Model.lora_targets=c_attn,q"}, 1),
      {"Model.lora_targets=\"c_attn,q\"", "\"q\" is not a linear layer of Model.arch=gpt2",
       "Set Model.lora_targets to e.g. c_attn,c_proj,c_fc"});
  ExpectUsageError(
      ValidateWith({"Model.arch=llama", "Model.lora_rank=8", "Model.lora_targets=q,fc"}, 1),
      {"\"fc\" is not a linear layer of Model.arch=llama", "q, k, v, o, gate, up, down"});
  EXPECT_TRUE(ValidateWith({"Model.lora_rank=8", "Model.lora_dropout=0.1"}, 1).ok());
  ExpectUsageError(ValidateWith({"Model.lora_rank=8", "Model.lora_dropout=1"}, 1),
                   {"Model.lora_dropout=1.0 must be in [0, 1)"});
  ExpectUsageError(ValidateWith({"Model.lora_rank=-1"}, 1), {"Model.lora_rank=-1"});
  // The adapters' settings without lora_rank: refused, not a silent full fine-tune.
  ExpectUsageError(ValidateWith({"Model.arch=llama", "Model.lora_targets=q,v"}, 1),
                   {"Model.lora_targets=\"q,v\" is a LoRA setting, and Model.lora_rank=0 turns "
                    "LoRA off",
                    "Set Model.lora_rank (e.g. 16)", "leave Model.lora_targets at its default"});
  ExpectUsageError(ValidateWith({"Model.lora_alpha=32"}, 1),
                   {"Model.lora_alpha=32.0 is a LoRA setting", "from -o Model.lora_alpha=32"});
  ExpectUsageError(ValidateWith({"Model.lora_dropout=0.1"}, 1),
                   {"Model.lora_dropout=0.1 is a LoRA setting"});
}

// Data.packing: documents (or ms-swift's padding_free) needs RoPE: GPT-2 is refused in one line.
TEST(ConfigValidate, PackingDocuments) {
  EXPECT_TRUE(ValidateWith({"Model.arch=llama", "Data.packing=documents"}, 1).ok());
  EXPECT_TRUE(ValidateWith({"Model.arch=llama", "Data.packing=padding_free"}, 1).ok());
  ExpectUsageError(ValidateWith({"Data.packing=documents"}, 1),
                   {"Data.packing=\"documents\" restarts RoPE positions",
                    "Model.arch=\"gpt2\" has learned positions", "Set Data.packing=concat"});
  ExpectUsageError(ValidateWith({"Data.packing=yes"}, 1),
                   {"Data.packing=\"yes\" must be one of concat, documents, padding_free"});
}

TEST(ConfigValidate, WorldSizeMustMatchTheDegrees) {
  ExpectUsageError(ValidateWith({"Distributed.dp_degree=2", "Distributed.tp_degree=2"}, 8),
                   {"Distributed.dp_degree*tp_degree*pp_degree=2*2*1=4", "world size 8",
                    "Set Distributed.dp_degree to 4", "launch 4 ranks"});
  ExpectUsageError(ValidateWith({"Distributed.tp_degree=4"}, 6),
                   {"world size 6 is not divisible by Distributed.tp_degree*pp_degree=4*1=4",
                    "(from -o Distributed.tp_degree=4)", "Launch a multiple of 4 ranks"});
  ExpectUsageError(ValidateWith({"Distributed.ep_degree=3", "Global.global_batch_size=24"}, 4),
                   {"Distributed.ep_degree=3 does not divide dp_degree=4", "divisor of 4"});
  // A degree above the world size is named at once (their product overflowed 64 bits and the
  // check divided by zero: SIGFPE; or wrapped to 0 and advised launching 0 ranks).
  ExpectUsageError(ValidateWith({"Distributed.tp_degree=4194304", "Distributed.pp_degree=2097152",
                                 "Distributed.sharding.sharding_degree=2097152"},
                                1),
                   {"Distributed.tp_degree=4194304 exceeds the world size 1",
                    "Launch at least 4194304 ranks, or set Distributed.tp_degree to at most 1"});
  ExpectUsageError(
      ValidateWith({"Distributed.tp_degree=65536", "Distributed.pp_degree=65536",
                    "Distributed.sharding.sharding_degree=65536", "Distributed.dp_degree=65536"},
                   65536),
      {"=65536*65536*65536*65536=9223372036854775807 does not match the world size 65536"});
}

TEST_F(ConfigTest, BatchMustSplitOverMicroBatchesAndRanks) {
  ExpectUsageError(ValidateWith({"Global.global_batch_size=10"}, 4),
                   {"Global.global_batch_size=10 is not divisible by micro_batch_size*dp_degree="
                    "2*4=8 (from -o Global.global_batch_size=10). Set global_batch_size to a "
                    "multiple of 8."});
  // Set in a file: the file is named.
  std::string path =
      WriteFile("x.yaml", "Global:\n  global_batch_size: 10\nData:\n  train_path: t.h5\n");
  StatusOr<TrainConfig> config = LoadConfig(path, {});
  ASSERT_TRUE(config.ok());
  ExpectUsageError(ValidateConfig(&config.value(), 4),
                   {"Global.global_batch_size=10 is not divisible by micro_batch_size*dp_degree="
                    "2*4=8 (" +
                    path + "). Set global_batch_size to a multiple of 8."});
}

TEST(ConfigValidate, ModelShapes) {
  ExpectUsageError(ValidateWith({"Model.seq_len=65"}, 1),
                   {"Model.seq_len=65 exceeds Model.max_seq_len=64", "at most 64"});
  // Divisibility comes before the llama family's head size, which hidden_size/num_heads gives.
  ExpectUsageError(
      ValidateWith({"Model.arch=llama", "Model.hidden_size=96", "Model.num_heads=5"}, 1),
      {"Model.hidden_size=96 is not divisible by Model.num_heads=5"});
  // The padded vocabulary is counted in 64 bits and refused past int32.
  ExpectUsageError(ValidateWith({"Model.vocab_size=2147483647"}, 1),
                   {"padded vocabulary 2147483648 (Model.vocab_size=2147483647 rounded up to a "
                    "multiple of Model.vocab_pad_multiple=128) is more than 2147483647",
                    "Model.vocab_pad_multiple to a small power of two"});
  StatusOr<TrainConfig> padded = LoadConfig("", {"Model.vocab_pad_multiple=2147483647"});
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->model.padded_vocab(), 2147483647);  // 257 rounded up, without overflow
  EXPECT_EQ(padded->model.padded_vocab64(), 2147483647);
  ExpectUsageError(ValidateWith({"Model.hidden_size=66"}, 1),
                   {"Model.hidden_size=66 is not divisible by Model.num_heads=4",
                    "Set Model.hidden_size to a multiple of 4, e.g. 64, or Model.num_heads to a "
                    "divisor of 66, e.g. 3"});
  // llama: the suggestions keep the head size even (RoPE) and the heads a multiple of the kv
  // heads (it suggested 2 heads of 65, which the next check refused), and are accepted.
  const std::vector<std::string> llama = {"Model.arch=llama", "Model.num_kv_heads=2"};
  auto with = [&](const std::string& more) {
    std::vector<std::string> all = llama;
    all.push_back(more);
    return ValidateWith(all, 1);
  };
  ExpectUsageError(with("Model.hidden_size=130"),
                   {"Set Model.hidden_size to a multiple of 8, e.g. 128."});
  EXPECT_TRUE(with("Model.hidden_size=128").ok());
  std::vector<std::string> six_heads = llama;
  six_heads.insert(six_heads.end(), {"Model.hidden_size=136", "Model.num_heads=6"});
  ExpectUsageError(ValidateWith(six_heads, 1),
                   {"Set Model.hidden_size to a multiple of 12, e.g. 132, or Model.num_heads to "
                    "a divisor of 136, e.g. 4"});
  six_heads.back() = "Model.num_heads=4";
  EXPECT_TRUE(ValidateWith(six_heads, 1).ok());
}

TEST(ConfigValidate, TensorParallelSplits) {
  ExpectUsageError(
      ValidateWith({"Model.hidden_size=102", "Model.num_heads=6", "Distributed.tp_degree=4"}, 4),
      {"Model.hidden_size=102 is not divisible by Distributed.tp_degree=4", "divisor of 102"});
  ExpectUsageError(
      ValidateWith({"Model.hidden_size=96", "Model.num_heads=6", "Distributed.tp_degree=4"}, 4),
      {"Model.num_heads=6 is not divisible by Distributed.tp_degree=4", "divisor of 6"});
  ExpectUsageError(ValidateWith({"Model.ffn_hidden_size=255", "Distributed.tp_degree=2"}, 2),
                   {"Model.ffn_hidden_size=255 is not divisible by Distributed.tp_degree=2",
                    "Model.ffn_hidden_size to a multiple of 2"});
  ExpectUsageError(ValidateWith({"Model.vocab_pad_multiple=1", "Distributed.tp_degree=2"}, 2),
                   {"padded vocabulary 257", "not divisible by Distributed.tp_degree=2",
                    "Set Model.vocab_pad_multiple to a multiple of 2"});
  ExpectUsageError(
      ValidateWith({"Model.sequence_parallel=true", "Model.seq_len=63", "Distributed.tp_degree=2"},
                   2),
      {"Model.sequence_parallel=true", "sequence length 63",
       "Set Model.seq_len to a multiple of 2"});
  EXPECT_TRUE(ValidateWith({"Model.sequence_parallel=true", "Distributed.tp_degree=2"}, 2).ok());
}

TEST(ConfigValidate, SizesBeyondAnyMachine) {
  const std::vector<std::string> big = {"Model.arch=llama", "Model.hidden_size=4096",
                                        "Model.num_heads=32", "Model.ffn_hidden_size=14336",
                                        "Model.num_layers=32"};
  auto with = [&](const std::string& more) {
    std::vector<std::string> all = big;
    all.push_back(more);
    return ValidateWith(all, 1);
  };
  EXPECT_TRUE(with("Model.num_experts=8").ok());
  ExpectUsageError(with("Model.num_experts=1048576"),
                   {"the model's sizes overflow: ", "more than 2^50", "1048576 experts of 14336"});
  // Layers are bounded first: far more than any model has would exhaust memory at setup (a
  // parameter list per layer) before a size check ran.
  ExpectUsageError(with("Model.num_layers=10000000"),
                   {"Model.num_layers", "must be in [1, 10001)"});
  ExpectUsageError(with("Model.hidden_size=16777216"), {"the model's sizes overflow: "});
}

// zero_stage1 is stage 1: another sharding_stage beside it is refused (it was silently stage 1,
// as the shipped GPU configs set zero_stage1), and the keys suggested give that stage.
TEST(ConfigValidate, ZeroStage1WithAnotherStage) {
  ExpectUsageError(
      ValidateWith({"Distributed.zero_stage1=true", "Distributed.sharding.sharding_stage=3"}, 2),
      {"Distributed.zero_stage1=true shards at stage 1, and "
       "Distributed.sharding.sharding_stage=3 asks for another",
       "Set Distributed.zero_stage1=false and Distributed.sharding.sharding_degree=2 to shard "
       "over every data rank at stage 3"});
  StatusOr<TrainConfig> followed = Validated(
      {"Distributed.sharding.sharding_degree=2", "Distributed.sharding.sharding_stage=3"}, 2);
  ASSERT_TRUE(followed.ok()) << followed.status().message();
  EXPECT_EQ(followed->distributed.zero_stage(), 3);
  EXPECT_TRUE(
      ValidateWith({"Distributed.zero_stage1=true", "Distributed.sharding.sharding_stage=1"}, 2)
          .ok());
}

TEST(ConfigValidate, PipelineStages) {
  ExpectUsageError(ValidateWith({"Distributed.pp_degree=3", "Global.global_batch_size=2"}, 3),
                   {"Distributed.pp_degree=3 exceeds Model.num_layers=2", "at most 2"});
  const std::vector<std::string> four = {"Model.num_layers=4", "Distributed.pp_degree=2"};
  auto with = [&](const std::string& layers) {
    std::vector<std::string> overrides = four;
    overrides.push_back("Distributed.pp_layers=" + layers);
    return ValidateWith(overrides, 2);
  };
  ExpectUsageError(with("[4]"), {"Distributed.pp_layers=[4] has 1 entry but "
                                 "Distributed.pp_degree=2",
                                 "one layer count per stage (2 entries)"});
  ExpectUsageError(with("[4, 0]"),
                   {"Distributed.pp_layers=[4, 0] gives stage 1 0 layers", "at least 1 layer"});
  ExpectUsageError(with("[3, 2]"), {"Distributed.pp_layers=[3, 2] sums to 5 but "
                                    "Model.num_layers=4",
                                    "add up to 4"});
  EXPECT_TRUE(with("[3, 1]").ok());
}

TEST(ConfigValidate, ValueRanges) {
  struct Case {
    std::string override_text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"Global.global_batch_size=0", "Global.global_batch_size=0 must be >= 1"},
      {"Global.micro_batch_size=0", "Global.micro_batch_size=0 must be >= 1"},
      {"Model.vocab_size=0", "Model.vocab_size=0 must be >= 1"},
      {"Model.vocab_pad_multiple=0", "Model.vocab_pad_multiple=0 must be >= 1"},
      {"Model.hidden_size=0", "Model.hidden_size=0 must be >= 1"},
      {"Model.num_layers=0", "Model.num_layers=0 must be >= 1"},
      {"Model.num_heads=-2", "Model.num_heads=-2 must be >= 1"},
      {"Model.ffn_hidden_size=-1", "Model.ffn_hidden_size=-1 must be >= 0"},
      {"Model.max_seq_len=0", "Model.max_seq_len=0 must be >= 1"},
      {"Model.seq_len=-1", "Model.seq_len=-1 must be >= 0"},
      {"Distributed.dp_degree=-1", "Distributed.dp_degree=-1 must be >= 0"},
      {"Distributed.tp_degree=0", "Distributed.tp_degree=0 must be >= 1"},
      {"Distributed.mp_degree=0", "Distributed.tp_degree=0 must be >= 1"},
      {"Distributed.pp_degree=0", "Distributed.pp_degree=0 must be >= 1"},
      {"Distributed.ep_degree=0", "Distributed.ep_degree=0 must be >= 1"},
      {"Engine.max_steps=0", "Engine.max_steps=0 must be >= 1"},
      {"Engine.logging_freq=0", "Engine.logging_freq=0 must be >= 1"},
      {"Engine.eval_freq=-1", "Engine.eval_freq=-1 must be >= 0"},
      {"Engine.eval_iters=0", "Engine.eval_iters=0 must be >= 1"},
      {"Engine.save_steps=-5", "Engine.save_steps=-5 must be >= 0"},
      {"Optimizer.lr=-1e-3", "Optimizer.lr=-0.001 must be >= 0"},
      {"Optimizer.min_lr=-1", "Optimizer.min_lr=-1.0 must be >= 0"},
      {"Optimizer.warmup_steps=-1", "Optimizer.warmup_steps=-1 must be >= 0"},
      {"Optimizer.decay_steps=-1", "Optimizer.decay_steps=-1 must be >= 0"},
      {"Optimizer.weight_decay=-0.1", "Optimizer.weight_decay=-0.1 must be >= 0"},
      {"Optimizer.beta1=1", "Optimizer.beta1=1.0 must be in [0, 1)"},
      {"Optimizer.beta2=-0.5", "Optimizer.beta2=-0.5 must be in [0, 1)"},
      {"Model.hidden_dropout=1", "Model.hidden_dropout=1.0 must be in [0, 1)"},
      {"Model.attention_dropout=-0.1", "Model.attention_dropout=-0.1 must be in [0, 1)"},
      {"Optimizer.eps=0", "Optimizer.eps=0.0 must be > 0"},
      {"Optimizer.grad_clip=-1", "Optimizer.grad_clip=-1.0 must be >= 0"},
      {"Data.val_fraction=1", "Data.val_fraction=1.0 must be in [0, 1)"},
      {"Checkpoint.keep_last=-1", "Checkpoint.keep_last=-1 must be >= 0"},
      {"Checkpoint.keep_every=-1", "Checkpoint.keep_every=-1 must be >= 0"},
  };
  for (const Case& c : cases) {
    std::string key = c.message.substr(0, c.message.find('='));
    ExpectUsageError(ValidateWith({c.override_text}, 1),
                     {c.message, "(from -o " + c.override_text + ")", "Set " + key + " to"});
  }
  ExpectUsageError(ValidateWith({"Optimizer.lr=1e-4", "Optimizer.min_lr=1e-3"}, 1),
                   {"Optimizer.min_lr=0.001 exceeds Optimizer.lr=0.0001",
                    "Set Optimizer.min_lr to at most 0.0001"});
  // A constant rate never takes min_lr (a fine-tuning lr below a config's min_lr was refused).
  EXPECT_TRUE(ValidateWith({"Optimizer.lr=1e-5", "Optimizer.min_lr=1e-3",
                            "Optimizer.decay_style=constant"},
                           1)
                  .ok());
}

TEST(ConfigValidate, ChoicesAndRequiredStrings) {
  ExpectUsageError(ValidateWith({"Global.device=gpu"}, 1),
                   {"Global.device=\"gpu\" must be one of auto, cpu, cuda", "Set Global.device"});
  ExpectUsageError(ValidateWith({"Engine.mix_precision=fp16"}, 1),
                   {"Engine.mix_precision=\"fp16\" must be one of bf16, fp32"});
  ExpectUsageError(ValidateWith({"Model.recompute=full"}, 1),
                   {"Model.recompute=\"full\" must be one of none, gelu, selective, block"});
  ExpectUsageError(ValidateWith({"Optimizer.decay_style=step"}, 1),
                   {"Optimizer.decay_style=\"step\" must be one of cosine, linear, constant"});
  ExpectUsageError(ValidateWith({"Engine.output_dir="}, 1),
                   {"Engine.output_dir is empty", "Set it to a folder"});
  StatusOr<TrainConfig> defaults = LoadConfig("", {});
  ASSERT_TRUE(defaults.ok());
  ExpectUsageError(ValidateConfig(&defaults.value(), 1),
                   {"Data.train_path is empty (built-in defaults)", "-o Data.train_path="});
}

TEST(ConfigValidate, LlamaFamilyShapes) {
  const std::string llama = "Model.arch=llama";
  ExpectUsageError(ValidateWith({llama, "Model.num_heads=4", "Model.num_kv_heads=3"}, 1),
                   {"Model.num_heads=4 is not divisible by Model.num_kv_heads=3",
                    "Set Model.num_kv_heads to a divisor of 4"});
  ExpectUsageError(ValidateWith({llama, "Model.num_kv_heads=2", "Distributed.tp_degree=4"}, 4),
                   {"the 2 key/value heads (Model.num_kv_heads) are not divisible by "
                    "Distributed.tp_degree=4",
                    "Set Distributed.tp_degree to a divisor of 2"});
  ExpectUsageError(ValidateWith({llama, "Model.head_dim=15"}, 1),
                   {"the head size 15", "Set Model.head_dim to an even number"});
  // The llama family's keys on a GPT-2 say which key and what to do.
  ExpectUsageError(ValidateWith({"Model.qk_norm=true"}, 1),
                   {"Model.qk_norm=true is a key of the llama family, and Model.arch=gpt2",
                    "Set Model.arch=llama"});
  ExpectUsageError(ValidateWith({"Model.num_kv_heads=2"}, 1),
                   {"Model.num_kv_heads=2 is a key of the llama family"});
  ExpectUsageError(ValidateWith({"Model.rope_theta=500000"}, 1),
                   {"Model.rope_theta=5.0e+05 is a key of the llama family"});
  // Llama 3's RoPE scaling settings without it would be ignored, in either family.
  for (const std::string arch : {"Model.arch=gpt2", "Model.arch=llama"})
    ExpectUsageError(ValidateWith({arch, "Model.rope_factor=4"}, 1),
                     {"Model.rope_factor=4.0 is a setting of Model.rope_scaling=llama3, and "
                      "Model.rope_scaling=\"none\" (it would be ignored)",
                      "Set Model.rope_scaling=llama3"});
  EXPECT_TRUE(ValidateWith({llama, "Model.rope_scaling=llama3", "Model.rope_factor=4",
                            "Model.rope_original_max_positions=4096"},
                           1)
                  .ok());
  ExpectUsageError(ValidateWith({"Model.arch=mistral"}, 1),
                   {"Model.arch=\"mistral\" must be one of gpt2, llama"});
  // OLMoE's q/k norm over all heads: with q/k norms, as many key/value heads as heads, no TP.
  const std::string full = "Model.qk_norm_type=full", heads = "Model.num_heads=4";
  EXPECT_TRUE(ValidateWith({llama, heads, "Model.qk_norm=true", full, "Model.num_kv_heads=4"}, 2).ok());
  ExpectUsageError(ValidateWith({llama, full}, 1),
                   {"Model.qk_norm_type=\"full\" without q/k norms (Model.qk_norm=false)",
                    "Set Model.qk_norm=true"});
  ExpectUsageError(ValidateWith({llama, heads, "Model.qk_norm=true", full, "Model.num_kv_heads=2"}, 1),
                   {"needs as many key/value heads as heads", "Set Model.num_kv_heads=4"});
  ExpectUsageError(ValidateWith({llama, heads, "Model.qk_norm=true", full, "Model.num_kv_heads=4",
                                 "Distributed.tp_degree=2"},
                                2),
                   {"normalises q and k over every head, and Distributed.tp_degree=2",
                    "Set Distributed.tp_degree=1"});
  ExpectUsageError(ValidateWith({llama, "Model.qk_norm_type=group"}, 1),
                   {"Model.qk_norm_type=\"group\" must be one of head, full"});
  // head_dim frees hidden_size from num_heads (Qwen3-0.6B: 16 heads of 128 on 1024).
  EXPECT_TRUE(ValidateWith({llama, "Model.hidden_size=64", "Model.num_heads=3",
                            "Model.num_kv_heads=1", "Model.head_dim=32"},
                           1)
                  .ok());
}

// ---------------------------------------------------------------- shipped configs

TEST(ShippedConfigs, TinyCpuLoadsAndValidatesOnOneRank) {
  StatusOr<TrainConfig> config = LoadConfig(Shipped("tiny-cpu.yaml"), {});
  ASSERT_TRUE(config.ok()) << config.status().message();
  Status status = ValidateConfig(&config.value(), 1);
  ASSERT_TRUE(status.ok()) << status.message();
  const TrainConfig& c = config.value();
  EXPECT_EQ(c.model.vocab_size, 257);
  EXPECT_EQ(c.model.padded_vocab(), 384);
  EXPECT_EQ(c.model.hidden_size, 128);
  EXPECT_EQ(c.model.num_layers, 4);
  EXPECT_EQ(c.model.num_heads, 4);
  EXPECT_EQ(c.model.max_seq_len, 128);
  EXPECT_EQ(c.global.global_batch_size, 16);
  EXPECT_EQ(c.global.micro_batch_size, 4);
  EXPECT_EQ(c.gradient_accumulation_steps(), 4);
  EXPECT_EQ(c.optimizer.lr, 3e-3);
  EXPECT_EQ(c.optimizer.min_lr, 3e-4);
  EXPECT_EQ(c.optimizer.warmup_steps, 20);
  EXPECT_EQ(c.engine.max_steps, 300);
  EXPECT_EQ(c.engine.logging_freq, 10);
  EXPECT_EQ(c.engine.eval_freq, 100);
  EXPECT_EQ(c.engine.save_steps, 100);
  EXPECT_EQ(c.data.train_path, "data/demo.h5");
  EXPECT_EQ(c.data.val_fraction, 0.05);
  EXPECT_EQ(c.global.device, "cpu");
  EXPECT_EQ(c.engine.output_dir, "out/tiny-cpu");
  // Also on 2 and 4 ranks (the MPI demos), and overridable.
  for (int world : {2, 4}) {
    StatusOr<TrainConfig> again = LoadConfig(Shipped("tiny-cpu.yaml"), {"Data.train_path=x.h5"});
    ASSERT_TRUE(again.ok());
    Status valid = ValidateConfig(&again.value(), world);
    EXPECT_TRUE(valid.ok()) << world << ": " << valid.message();
  }
}

TEST(ShippedConfigs, GpuConfigsValidateOnTheirWorldSizes) {
  struct Case {
    std::string file;
    int hidden, layers, heads, seq;
    std::vector<std::string> overrides;
    int world;
  };
  const std::vector<Case> cases = {
      {"gpt2-124m.yaml", 768, 12, 12, 1024, {}, 1},
      {"gpt2-124m.yaml", 768, 12, 12, 1024, {}, 8},
      {"gpt2-124m.yaml", 768, 12, 12, 1024, {"Distributed.tp_degree=2"}, 8},
      {"gpt2-350m.yaml", 1024, 24, 16, 1024, {}, 8},
      {"gpt2-350m.yaml", 1024, 24, 16, 1024, {"Distributed.pp_degree=2"}, 16},
      {"gpt-1.3b.yaml", 2048, 24, 16, 2048, {}, 8},
      {"gpt-1.3b.yaml", 2048, 24, 16, 2048, {"Distributed.mp_degree=4"}, 32},
  };
  for (const Case& c : cases) {
    StatusOr<TrainConfig> config = LoadConfig(Shipped(c.file), c.overrides);
    ASSERT_TRUE(config.ok()) << c.file << ": " << config.status().message();
    Status status = ValidateConfig(&config.value(), c.world);
    EXPECT_TRUE(status.ok()) << c.file << " world " << c.world << ": " << status.message();
    EXPECT_EQ(config->model.vocab_size, 50257);
    EXPECT_EQ(config->model.padded_vocab(), 50304);
    EXPECT_EQ(config->model.hidden_size, c.hidden);
    EXPECT_EQ(config->model.num_layers, c.layers);
    EXPECT_EQ(config->model.num_heads, c.heads);
    EXPECT_EQ(config->model.sequence_length(), c.seq);
    EXPECT_EQ(config->global.device, "cuda");
  }
}

TEST(ShippedConfigs, LlamaFamilyConfigsValidate) {
  for (const char* file :
       {"llama-3.2-1b.yaml", "llama-3.1-8b.yaml", "qwen3-0.6b.yaml", "tiny-llama-cpu.yaml"})
    for (int world : {1, 4}) {
      StatusOr<TrainConfig> config = LoadConfig(Shipped(file), {"Data.train_path=x.h5"});
      ASSERT_TRUE(config.ok()) << file << ": " << config.status().message();
      Status status = ValidateConfig(&config.value(), world);
      EXPECT_TRUE(status.ok()) << file << " world " << world << ": " << status.message();
      EXPECT_EQ(config->model.arch, "llama");
    }
  StatusOr<TrainConfig> qwen = LoadConfig(Shipped("qwen3-0.6b.yaml"), {});
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(qwen->model.head_size(), 128);
  EXPECT_EQ(qwen->model.kv_heads(), 8);
  EXPECT_TRUE(qwen->model.qk_norm);
  // tp 8 would split its 8 kv heads one per rank; tp 16 cannot.
  StatusOr<TrainConfig> tp16 = LoadConfig(Shipped("qwen3-0.6b.yaml"), {"Distributed.tp_degree=16"});
  ASSERT_TRUE(tp16.ok());
  EXPECT_FALSE(ValidateConfig(&tp16.value(), 16).ok());
}

}  // namespace
}  // namespace trainer
