// Tests for src/config/: LoadConfig (YAML, overrides, types, unknown keys with suggestions,
// line numbers), the FormatConfig round trip, and ChangedSettings. Validation and the shipped
// configs: config_validate_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/config_keys.h"
#include "config/config_loader.h"
#include "config/suggest.h"
#include "config_test_util.h"

namespace trainer {
namespace {

using namespace config_testing;

// ---------------------------------------------------------------- key table and suggestions

TEST(ConfigKeys, ListsEveryFieldOnceInSectionOrder) {
  const std::vector<std::string> expected = {"Global.seed",
                                             "Global.global_batch_size",
                                             "Global.micro_batch_size",
                                             "Global.device",
                                             "Model.arch",
                                             "Model.vocab_size",
                                             "Model.vocab_pad_multiple",
                                             "Model.hidden_size",
                                             "Model.num_layers",
                                             "Model.num_heads",
                                             "Model.ffn_hidden_size",
                                             "Model.max_seq_len",
                                             "Model.seq_len",
                                             "Model.recompute",
                                             "Model.sequence_parallel",
                                             "Model.loss_chunk_tokens",
                                             "Model.num_kv_heads",
                                             "Model.head_dim",
                                             "Model.norm_eps",
                                             "Model.rope_theta",
                                             "Model.rope_scaling",
                                             "Model.rope_factor",
                                             "Model.rope_low_freq_factor",
                                             "Model.rope_high_freq_factor",
                                             "Model.rope_original_max_positions",
                                             "Model.qkv_bias",
                                             "Model.qk_norm",
                                             "Model.qk_norm_type",
                                             "Model.tie_embeddings",
                                             "Model.num_experts",
                                             "Model.moe_router_topk",
                                             "Model.moe_ffn_hidden_size",
                                             "Model.moe_shared_expert_intermediate_size",
                                             "Model.moe_layer_freq",
                                             "Model.moe_first_k_dense",
                                             "Model.moe_router_score_function",
                                             "Model.moe_router_pre_softmax",
                                             "Model.moe_norm_topk_prob",
                                             "Model.moe_aux_loss_coeff",
                                             "Model.moe_router_load_balancing_type",
                                             "Model.moe_z_loss_coeff",
                                             "Model.moe_expert_capacity_factor",
                                             "Model.moe_router_bias_update_rate",
                                             "Model.bias",
                                             "Model.hidden_dropout",
                                             "Model.attention_dropout",
                                             "Model.lora_rank",
                                             "Model.lora_alpha",
                                             "Model.lora_dropout",
                                             "Model.lora_targets",
                                             "Distributed.dp_degree",
                                             "Distributed.tp_degree",
                                             "Distributed.pp_degree",
                                             "Distributed.ep_degree",
                                             "Distributed.pp_layers",
                                             "Distributed.zero_stage1",
                                             "Distributed.overlap_grad_reduce",
                                             "Distributed.gpu_collectives",
                                             "Distributed.sharding.sharding_degree",
                                             "Distributed.sharding.sharding_stage",
                                             "Distributed.sharding.sharding_offload",
                                             "Distributed.sharding.reduce_overlap",
                                             "Distributed.sharding.broadcast_overlap",
                                             "Engine.max_steps",
                                             "Engine.logging_freq",
                                             "Engine.eval_freq",
                                             "Engine.eval_iters",
                                             "Engine.save_steps",
                                             "Engine.output_dir",
                                             "Engine.mix_precision",
                                             "Engine.watchdog_s",
                                             "Engine.tensorboard",
                                             "Engine.profile",
                                             "Engine.peak_tflops",
                                             "Engine.exit_duration_min",
                                             "Engine.gpu_routes",
                                             "Optimizer.lr",
                                             "Optimizer.min_lr",
                                             "Optimizer.warmup_steps",
                                             "Optimizer.decay_steps",
                                             "Optimizer.decay_style",
                                             "Optimizer.weight_decay",
                                             "Optimizer.beta1",
                                             "Optimizer.beta2",
                                             "Optimizer.eps",
                                             "Optimizer.grad_clip",
                                             "Optimizer.store_param_remainders",
                                             "Data.train_path",
                                             "Data.train_weights",
                                             "Data.val_path",
                                             "Data.val_fraction",
                                             "Data.shift_windows",
                                             "Data.packing",
                                             "Checkpoint.dir",
                                             "Checkpoint.keep_last",
                                             "Checkpoint.keep_every",
                                             "Checkpoint.resume",
                                             "Checkpoint.init_from",
                                             "Checkpoint.async_save"};
  EXPECT_EQ(AllConfigKeys(), expected);
}

TEST(ConfigKeys, DocsDescribeEveryKeyInItsSection) {
  std::ifstream file(std::string(TRAINER_SOURCE_DIR) + "/docs/config.md");
  std::stringstream text;
  text << file.rdbuf();
  const std::string docs = text.str();
  for (const std::string& key : AllConfigKeys()) {
    const std::string section = key.substr(0, key.find('.'));
    size_t begin = docs.find("\n### " + section + "\n");
    ASSERT_NE(begin, std::string::npos) << "docs/config.md has no section " << section;
    size_t end = docs.find("\n#", begin + 1);
    size_t row = docs.find("| `" + key.substr(section.size() + 1) + "` |", begin);
    EXPECT_TRUE(row != std::string::npos && row < end) << "docs/config.md lacks " << key;
  }
}

TEST(Suggest, EditDistanceAndClosestMatch) {
  EXPECT_EQ(EditDistance("hidden_size", "hidden_size"), 0u);
  EXPECT_EQ(EditDistance("hiden_size", "hidden_size"), 1u);   // deletion
  EXPECT_EQ(EditDistance("hidden_szie", "hidden_size"), 1u);  // adjacent swap
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(ClosestMatch("num_layer", {"num_heads", "num_layers"}), "num_layers");
  EXPECT_EQ(ClosestMatch("completely_else", {"num_heads", "num_layers"}), "");
}

// ---------------------------------------------------------------- loading

TEST_F(ConfigTest, EmptyPathGivesDefaults) {
  StatusOr<TrainConfig> config = LoadConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status().message();
  TrainConfig defaults;
  EXPECT_EQ(config->model.hidden_size, defaults.model.hidden_size);
  EXPECT_EQ(config->global.global_batch_size, defaults.global.global_batch_size);
  EXPECT_EQ(config->optimizer.lr, defaults.optimizer.lr);
  EXPECT_EQ(config->data.train_path, "");
}

TEST_F(ConfigTest, ReadsEveryTypeFromYaml) {
  std::string path = WriteFile("all.yaml",
                               "Global:\n"
                               "  seed: 18446744073709551615\n"
                               "  device: cpu\n"
                               "Model:\n"
                               "  hidden_size: 96\n"
                               "  sequence_parallel: true\n"
                               "Distributed:\n"
                               "  pp_layers: [3, 1]\n"
                               "  sharding:\n"
                               "    sharding_degree: 4\n"
                               "    reduce_overlap: false\n"
                               "Optimizer:\n"
                               "  lr: 3e-4\n"
                               "  eps: 1.0e-8\n"
                               "Data:\n"
                               "  train_path: \"data/a b#c.h5\"\n"
                               "Checkpoint:\n"
                               "  resume:\n"
                               "Engine:\n");
  StatusOr<TrainConfig> config = LoadConfig(path, {});
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->global.seed, 18446744073709551615ull);
  EXPECT_EQ(config->global.device, "cpu");
  EXPECT_EQ(config->model.hidden_size, 96);
  EXPECT_TRUE(config->model.sequence_parallel);
  EXPECT_EQ(config->distributed.pp_layers, (std::vector<int>{3, 1}));
  EXPECT_EQ(config->distributed.sharding.sharding_degree, 4);  // a nested map
  EXPECT_FALSE(config->distributed.sharding.reduce_overlap);
  EXPECT_EQ(config->optimizer.lr, 3e-4);
  EXPECT_EQ(config->optimizer.eps, 1e-8);
  EXPECT_EQ(config->data.train_path, "data/a b#c.h5");
  EXPECT_EQ(config->checkpoint.resume, "");
  EXPECT_EQ(config->model.num_layers, TrainConfig().model.num_layers);  // untouched key
}

TEST_F(ConfigTest, OverridesChangeValuesInOrderAfterTheFile) {
  std::string path = WriteFile("base.yaml", "Model:\n  hidden_size: 96\n  num_layers: 4\n");
  StatusOr<TrainConfig> config =
      LoadConfig(path, {"Model.hidden_size=256", "Optimizer.lr=3e-4", "Distributed.pp_layers=[3,2]",
                        "Model.sequence_parallel=true", "Checkpoint.resume=auto", "Global.seed=7",
                        "Data.train_path=x.h5", "Model.hidden_size=512",
                        "Engine.output_dir=", "Distributed.mp_degree=2"});
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->model.hidden_size, 512);  // the last override wins
  EXPECT_EQ(config->model.num_layers, 4);     // from the file
  EXPECT_EQ(config->optimizer.lr, 3e-4);
  EXPECT_EQ(config->distributed.pp_layers, (std::vector<int>{3, 2}));
  EXPECT_TRUE(config->model.sequence_parallel);
  EXPECT_EQ(config->checkpoint.resume, "auto");
  EXPECT_EQ(config->global.seed, 7u);
  EXPECT_EQ(config->data.train_path, "x.h5");
  EXPECT_EQ(config->engine.output_dir, "");
  EXPECT_EQ(config->distributed.tp_degree, 2);
}

// A config read from a pipe (-c <(...), -c /dev/stdin), which cannot seek back: every byte
// (the HDF5 signature check took the first 8 from it).
TEST_F(ConfigTest, ReadsAConfigFromAPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string text = "Model:\n  hidden_size: 96\nData:\n  train_path: d.h5\n";
  ASSERT_EQ(write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fds[1]);
  StatusOr<TrainConfig> config = LoadConfig("/dev/fd/" + std::to_string(fds[0]), {});
  close(fds[0]);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->model.hidden_size, 96);
  EXPECT_EQ(config->data.train_path, "d.h5");
}

// Numbers as YAML 1.2's core schema reads them: 0x hexadecimal, 0o octal, a leading 0 decimal;
// a float that underflows is its nearest double, finite (it was refused as not finite).
TEST_F(ConfigTest, YamlCoreSchemaNumbers) {
  StatusOr<TrainConfig> config = LoadConfig("", {"Model.hidden_size=0x40", "Global.seed=0o17",
                                                 "Model.num_layers=010", "Optimizer.eps=1e-310"});
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->model.hidden_size, 64);
  EXPECT_EQ(config->global.seed, 15u);
  EXPECT_EQ(config->model.num_layers, 10);
  EXPECT_EQ(config->optimizer.eps, 1e-310);
  for (const char* bad :
       {"Model.hidden_size=0x", "Model.hidden_size=0o9", "Model.hidden_size=0x-5"})
    ExpectUsageError(LoadConfig("", {bad}).status(), {"must be an integer"});
}

TEST_F(ConfigTest, MpDegreeIsAnAliasOfTpDegree) {
  std::string path = WriteFile("mp.yaml", "Distributed:\n  mp_degree: 4\n");
  StatusOr<TrainConfig> config = LoadConfig(path, {});
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->distributed.tp_degree, 4);

  std::string both = WriteFile("both.yaml", "Distributed:\n  tp_degree: 2\n  mp_degree: 4\n");
  ExpectUsageError(
      LoadConfig(both, {}).status(),
      {"Distributed.tp_degree and Distributed.mp_degree both set", "lines 2 and 3", "Keep one"});
}

TEST_F(ConfigTest, WrongTypesNameKeyValueAndLine) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"Global:\n  seed: 1\nModel:\n  vocab_size: 257\n  hidden_size: abc\n",
       "Model.hidden_size must be an integer, got \"abc\" (PATH line 5)"},
      {"Model:\n  hidden_size: 1.5\n", "Model.hidden_size must be an integer, got \"1.5\""},
      {"Model:\n  hidden_size: 99999999999\n", "Model.hidden_size must be an integer in"},
      {"Model:\n  hidden_size: [1]\n", "Model.hidden_size must be an integer, got a list"},
      {"Model:\n  hidden_size:\n", "got an empty value (PATH line 2)"},
      {"Global:\n  seed: -1\n", "Global.seed must be a non-negative integer, got \"-1\""},
      {"Optimizer:\n\n  lr: fast\n",
       "Optimizer.lr must be a finite number, got \"fast\" (PATH line 3)"},
      {"Model:\n  moe_aux_loss_coeff: .nan\n", "Model.moe_aux_loss_coeff must be a finite number"},
      {"Model:\n  moe_z_loss_coeff: .inf\n", "docs/config.md gives each key's type and default"},
      {"Model:\n  sequence_parallel: maybe\n", "Model.sequence_parallel must be true or false"},
      {"Global:\n  device: {a: 1}\n", "Global.device must be a string, got a map"},
      {"Distributed:\n  pp_layers: 3\n", "Distributed.pp_layers must be a list of integers"},
      {"Distributed:\n  pp_layers:\n    - 3\n    - x\n",
       "Distributed.pp_layers[1] must be an integer, got \"x\""},
  };
  for (const Case& c : cases) {
    std::string path = WriteFile("typed.yaml", c.yaml);
    std::string expected = c.message;
    size_t at = expected.find("PATH");
    if (at != std::string::npos) expected.replace(at, 4, path);
    ExpectUsageError(LoadConfig(path, {}).status(), {expected});
  }
  ExpectUsageError(LoadConfig("", {"Model.hidden_size=abc"}).status(),
                   {"Model.hidden_size must be an integer, got \"abc\" (from -o "
                    "Model.hidden_size=abc)"});
  ExpectUsageError(LoadConfig("", {"Distributed.pp_layers=[3,x]"}).status(),
                   {"Distributed.pp_layers[1] must be an integer", "from -o"});
}

TEST_F(ConfigTest, UnknownKeysSuggestTheClosest) {
  std::string path = WriteFile("typo.yaml",
                               "# comment\n"
                               "Global:\n"
                               "  seed: 1\n"
                               "Model:\n"
                               "  vocab_size: 257\n"
                               "\n"
                               "  hiden_size: 7\n");
  ExpectUsageError(LoadConfig(path, {}).status(), {"unknown key Model.hiden_size (" + path +
                                                   " line 7). Did you mean Model.hidden_size?"});
  // A misspelt section: suggestion across sections.
  std::string section = WriteFile("section.yaml", "Modle:\n  hidden_size: 7\n");
  ExpectUsageError(LoadConfig(section, {}).status(),
                   {"unknown key Modle.hidden_size (" + section + " line 2)",
                    "Did you mean Model.hidden_size?"});
  // A nested key one level too high: its map's key.
  ExpectUsageError(LoadConfig("", {"Distributed.sharding_stage=2"}).status(),
                   {"unknown key Distributed.sharding_stage",
                    "Did you mean Distributed.sharding.sharding_stage?"});
  std::string empty_section = WriteFile("empty.yaml", "Optimiser:\n");
  ExpectUsageError(LoadConfig(empty_section, {}).status(),
                   {"unknown section Optimiser", "Did you mean Optimizer?"});
  // A key under the wrong section.
  ExpectUsageError(LoadConfig("", {"Model.lr=1"}).status(),
                   {"unknown key Model.lr (from -o Model.lr=1)", "Did you mean Optimizer.lr?"});
  ExpectUsageError(LoadConfig("", {"Engine.max_step=5"}).status(),
                   {"unknown key Engine.max_step (from -o Engine.max_step=5). Did you mean "
                    "Engine.max_steps?"});
  ExpectUsageError(LoadConfig("", {"Foo.bar=5"}).status(),
                   {"unknown key Foo.bar (from -o Foo.bar=5). Sections are Global, Model"});
  ExpectUsageError(LoadConfig("", {"Model.zzzzzzzz=5"}).status(),
                   {"unknown key Model.zzzzzzzz", "Keys of Model: arch, vocab_size"});
}

TEST_F(ConfigTest, MalformedOverridesFilesAndYaml) {
  ExpectUsageError(LoadConfig("", {"Model.hidden_size"}).status(),
                   {"malformed override -o Model.hidden_size", "no '='", "Section.key=value"});
  ExpectUsageError(LoadConfig("", {"hidden_size=3"}).status(),
                   {"malformed override -o hidden_size=3", "Did you mean -o Model.hidden_size=3?"});
  ExpectUsageError(LoadConfig("", {".hidden_size=3"}).status(), {"must be Section.key"});
  ExpectUsageError(LoadConfig("", {"Data.train_path=[a"}).status(),
                   {"invalid value in override -o Data.train_path=[a"});
  std::string missing = dir_ + "/nope.yaml";
  ExpectUsageError(LoadConfig(missing, {}).status(),
                   {"cannot open config file (" + missing + ")", "No such file"});
  ExpectUsageError(LoadConfig(dir_, {}).status(), {"is a directory"});
  std::string broken = WriteFile("broken.yaml", "Model:\n  hidden_size: 3\n  pp: [1, 2\n");
  ExpectUsageError(LoadConfig(broken, {}).status(),
                   {"invalid YAML in config file (" + broken + " line "});
  // A dataset or checkpoint as the config (HDF5's signature, then binary): named as such.
  std::string h5 = WriteFile("data.h5", std::string("\x89HDF\r\n\x1a\n\0\0\x0b\\.", 13));
  ExpectUsageError(LoadConfig(h5, {}).status(),
                   {"config file is an HDF5 file (" + h5 + "): a packed dataset or a checkpoint",
                    "-o Data.train_path=" + h5});
  std::string big = WriteFile("big.yaml", std::string(2 << 20, '#'));  // not a config
  ExpectUsageError(LoadConfig(big, {}).status(),
                   {"config file is 2.0 MiB (" + big + "): not a YAML config"});
  std::string list = WriteFile("list.yaml", "- a\n- b\n");
  ExpectUsageError(LoadConfig(list, {}).status(), {"not a map of sections"});
  std::string flat = WriteFile("flat.yaml", "Model: 3\n");
  ExpectUsageError(LoadConfig(flat, {}).status(), {"section Model is not a map"});
  std::string dup = WriteFile("dup.yaml", "Model:\n  hidden_size: 3\n  hidden_size: 4\n");
  ExpectUsageError(LoadConfig(dup, {}).status(),
                   {"duplicate key Model.hidden_size (" + dup + " line 3; first at line 2)"});
  // A nested map given twice (YAML 1.2: a duplicate key) is refused, not merged.
  std::string dup_map = WriteFile("dupmap.yaml",
                                  "Distributed:\n  sharding:\n    sharding_degree: 2\n"
                                  "  tp_degree: 1\n  sharding:\n    sharding_stage: 3\n");
  ExpectUsageError(LoadConfig(dup_map, {}).status(),
                   {"duplicate key Distributed.sharding (" + dup_map +
                    " line 5; first at line 2). Merge the two into one."});
  std::string dup_section = WriteFile("dups.yaml", "Model:\n  hidden_size: 3\nModel:\n");
  ExpectUsageError(LoadConfig(dup_section, {}).status(), {"duplicate section Model"});
  // A second YAML document is refused, not dropped with its keys (the typo in it included).
  std::string two = WriteFile(
      "two.yaml", "Data:\n  train_path: x.h5\n---\nOptimizer:\n  lr: 0.5\n  bogus_key: 3\n");
  ExpectUsageError(LoadConfig(two, {}).status(),
                   {"config file holds more than one YAML document (" + two + " line 4",
                    "Merge the documents into one"});
  std::string empty_second = WriteFile("two_empty.yaml", "Model:\n  hidden_size: 32\n---\n");
  ExpectUsageError(LoadConfig(empty_second, {}).status(),
                   {"more than one YAML document (" + empty_second + " line 3"});
  // One document, opened by its marker: read as usual.
  StatusOr<TrainConfig> marked =
      LoadConfig(WriteFile("marked.yaml", "# comment\n---\nModel:\n  hidden_size: 32\n"), {});
  ASSERT_TRUE(marked.ok()) << marked.status().message();
  EXPECT_EQ(marked->model.hidden_size, 32);
}

// ---------------------------------------------------------------- round trip

// Every key of the table, compared one by one (each field's own value, not FormatConfig's
// text): FormatField is exact for every type (shortest round-trip doubles, escaped strings).
void ExpectSameConfig(const TrainConfig& a, const TrainConfig& b) {
  TrainConfig x = a, y = b;  // the key table hands out pointers into a mutable config
  for (const ConfigKey& key : ConfigKeyTable())
    EXPECT_EQ(FormatField(key.field(x)), FormatField(key.field(y))) << key.full_name();
}

TEST_F(ConfigTest, FormatConfigRoundTrips) {
  TrainConfig c;  // every field away from its default, with awkward values
  c.global = {18446744073709551615ull, 96, 3, "cuda"};
  c.model.vocab_size = 50257;
  c.model.vocab_pad_multiple = 64;
  c.model.hidden_size = 1600;
  c.model.num_layers = 48;
  c.model.num_heads = 25;
  c.model.ffn_hidden_size = 6401;
  c.model.max_seq_len = 2048;
  c.model.seq_len = 1000;
  c.model.recompute = "block";
  c.model.sequence_parallel = true;
  c.distributed = {3, 2, 4, 1, {10, 12, 13, 13}, true, {4, 3, true, false, false}};
  c.engine = {12345, 7, 0, 9, 250, "out dir/with: colon # and hash", "fp32"};
  c.optimizer = {6e-4,  1.0 / 3.0, 700, 18000,    0.0,  0.8999999999999999,
                 0.999, 1e-12,     0.0, "linear", false};
  c.data = {"data/\"quoted\"\\back\tslash\n.h5", "0.5, 2", "val data/*.h5 # not a comment", 0.05};
  c.checkpoint = {"/abs/ckpt", 0, 1000, "auto", "hf/gpt2 \"pretrained\"", false};
  c.engine.exit_duration_min = 0.25;
  c.engine.gpu_routes = "out/run 1/gpu_routes.json";
  c.engine.watchdog_s = 12.5;
  c.engine.tensorboard = false;
  c.engine.profile = true;
  c.engine.peak_tflops = 1979.5;
  c.distributed.ep_degree = 2;
  c.distributed.overlap_grad_reduce = true;
  c.distributed.gpu_collectives = "mpi";
  c.data.shift_windows = true;
  c.data.packing = "documents";
  ModelConfig& m = c.model;
  m.arch = "llama";
  m.loss_chunk_tokens = 4097;
  m.num_kv_heads = 5;
  m.head_dim = 96;
  m.norm_eps = 1e-6;
  m.rope_theta = 500000.0;
  m.rope_scaling = "llama3";
  m.rope_factor = 32.0;
  m.rope_low_freq_factor = 0.5;
  m.rope_high_freq_factor = 2.5;
  m.rope_original_max_positions = 131072;
  m.qkv_bias = true;
  m.qk_norm = true;
  m.qk_norm_type = "full";
  m.tie_embeddings = false;
  m.num_experts = 64;
  m.moe_router_topk = 8;
  m.moe_ffn_hidden_size = 1408;
  m.moe_shared_expert_intermediate_size = 5632;
  m.moe_layer_freq = 2;
  m.moe_first_k_dense = 3;
  m.moe_router_score_function = "sigmoid";
  m.moe_router_pre_softmax = false;
  m.moe_norm_topk_prob = true;
  m.moe_aux_loss_coeff = 0.001;
  m.moe_router_load_balancing_type = "seq_aux_loss";
  m.moe_z_loss_coeff = 1e-3 / 3;
  m.moe_expert_capacity_factor = 1.25;
  m.moe_router_bias_update_rate = 0.0001;
  m.bias = false;
  m.hidden_dropout = 0.1;
  m.attention_dropout = 0.2;
  m.lora_rank = 16;
  m.lora_alpha = 32;
  m.lora_dropout = 0.05;
  m.lora_targets = "q,v,down";
  // Every key away from its default, so that a key the round trip loses cannot go unnoticed.
  TrainConfig defaults_config, values = c;
  for (const ConfigKey& key : ConfigKeyTable())
    EXPECT_NE(FormatField(key.field(values)), FormatField(key.field(defaults_config)))
        << key.full_name() << " keeps its default in this test: give it another value";
  std::string text = FormatConfig(c);
  StatusOr<TrainConfig> back = LoadConfig(WriteFile("resolved.yaml", text), {});
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  ExpectSameConfig(back.value(), c);
  // All sections and keys, in AllConfigKeys order.
  size_t position = 0;
  for (const std::string& key : AllConfigKeys()) {
    // A nested key (Distributed.sharding.sharding_degree) sits indented under its map.
    std::string name = key.substr(key.find('.') + 1);
    const bool nested = name.find('.') != std::string::npos;
    name = (nested ? "\n    " + name.substr(name.find('.') + 1) : "\n  " + name) + ": ";
    size_t found = text.find(name, position);
    EXPECT_NE(found, std::string::npos) << key << "\n" << text;
    position = found == std::string::npos ? position : found;
  }
  // Defaults too (empty strings, empty list, default doubles).
  StatusOr<TrainConfig> defaults = LoadConfig(WriteFile("d.yaml", FormatConfig(TrainConfig())), {});
  ASSERT_TRUE(defaults.ok()) << defaults.status().message();
  ExpectSameConfig(defaults.value(), TrainConfig());
}

}  // namespace
}  // namespace trainer
