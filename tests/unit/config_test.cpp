// Tests for src/config/: LoadConfig (YAML, overrides, types, unknown keys with suggestions,
// line numbers), ValidateConfig (one failing case per rule, asserting kUsage and the message's
// key and fix), FormatConfig round trip, and the shipped configs under configs/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "config/suggest.h"

namespace trainer {
namespace {

// A scratch folder for YAML files, removed at the end of the test.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "config_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

std::string Shipped(const std::string& name) {
  return std::string(TRAINER_SOURCE_DIR) + "/configs/" + name;
}

// Asserts a usage error whose message holds every one of `parts`.
void ExpectUsageError(const Status& status, const std::vector<std::string>& parts) {
  ASSERT_FALSE(status.ok()) << "expected an error holding: " << parts.front();
  EXPECT_EQ(status.code(), ExitCode::kUsage) << status.message();
  for (const std::string& part : parts)
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "message: " << status.message() << "\nmissing: " << part;
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << "one line: " << status.message();
}

// Defaults plus a training file, then `overrides`, validated for `world_size`.
Status ValidateWith(std::vector<std::string> overrides, int world_size) {
  overrides.insert(overrides.begin(), "Data.train_path=train.h5");
  StatusOr<TrainConfig> config = LoadConfig("", overrides);
  if (!config.ok()) return config.status();
  return ValidateConfig(&config.value(), world_size);
}

// ---------------------------------------------------------------- key table and suggestions

TEST(ConfigKeys, ListsEveryFieldOnceInSectionOrder) {
  const std::vector<std::string> expected = {"Global.seed",
                                             "Global.global_batch_size",
                                             "Global.micro_batch_size",
                                             "Global.device",
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
                                             "Distributed.dp_degree",
                                             "Distributed.tp_degree",
                                             "Distributed.pp_degree",
                                             "Distributed.ep_degree",
                                             "Distributed.pp_layers",
                                             "Distributed.zero_stage1",
                                             "Distributed.overlap_grad_reduce",
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
                                             "Optimizer.lr",
                                             "Optimizer.min_lr",
                                             "Optimizer.warmup_steps",
                                             "Optimizer.decay_steps",
                                             "Optimizer.weight_decay",
                                             "Optimizer.beta1",
                                             "Optimizer.beta2",
                                             "Optimizer.eps",
                                             "Optimizer.grad_clip",
                                             "Data.train_path",
                                             "Data.val_path",
                                             "Data.val_fraction",
                                             "Checkpoint.dir",
                                             "Checkpoint.keep_last",
                                             "Checkpoint.keep_every",
                                             "Checkpoint.resume"};
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
      {"Optimizer:\n\n  lr: fast\n", "Optimizer.lr must be a number, got \"fast\" (PATH line 3)"},
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
                   {"unknown key Model.zzzzzzzz", "Keys of Model: vocab_size"});
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
  std::string list = WriteFile("list.yaml", "- a\n- b\n");
  ExpectUsageError(LoadConfig(list, {}).status(), {"not a map of sections"});
  std::string flat = WriteFile("flat.yaml", "Model: 3\n");
  ExpectUsageError(LoadConfig(flat, {}).status(), {"section Model is not a map"});
  std::string dup = WriteFile("dup.yaml", "Model:\n  hidden_size: 3\n  hidden_size: 4\n");
  ExpectUsageError(LoadConfig(dup, {}).status(),
                   {"duplicate key Model.hidden_size (" + dup + " line 3; first at line 2)"});
  std::string dup_section = WriteFile("dups.yaml", "Model:\n  hidden_size: 3\nModel:\n");
  ExpectUsageError(LoadConfig(dup_section, {}).status(), {"duplicate section Model"});
}

// ---------------------------------------------------------------- round trip

// Every field, compared one by one (not through FormatConfig).
void ExpectSameConfig(const TrainConfig& a, const TrainConfig& b) {
  EXPECT_EQ(a.global.seed, b.global.seed);
  EXPECT_EQ(a.global.global_batch_size, b.global.global_batch_size);
  EXPECT_EQ(a.global.micro_batch_size, b.global.micro_batch_size);
  EXPECT_EQ(a.global.device, b.global.device);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.vocab_pad_multiple, b.model.vocab_pad_multiple);
  EXPECT_EQ(a.model.hidden_size, b.model.hidden_size);
  EXPECT_EQ(a.model.num_layers, b.model.num_layers);
  EXPECT_EQ(a.model.num_heads, b.model.num_heads);
  EXPECT_EQ(a.model.ffn_hidden_size, b.model.ffn_hidden_size);
  EXPECT_EQ(a.model.max_seq_len, b.model.max_seq_len);
  EXPECT_EQ(a.model.seq_len, b.model.seq_len);
  EXPECT_EQ(a.model.recompute, b.model.recompute);
  EXPECT_EQ(a.model.sequence_parallel, b.model.sequence_parallel);
  EXPECT_EQ(a.distributed.dp_degree, b.distributed.dp_degree);
  EXPECT_EQ(a.distributed.tp_degree, b.distributed.tp_degree);
  EXPECT_EQ(a.distributed.pp_degree, b.distributed.pp_degree);
  EXPECT_EQ(a.distributed.ep_degree, b.distributed.ep_degree);
  EXPECT_EQ(a.distributed.pp_layers, b.distributed.pp_layers);
  EXPECT_EQ(a.distributed.zero_stage1, b.distributed.zero_stage1);
  EXPECT_EQ(a.engine.max_steps, b.engine.max_steps);
  EXPECT_EQ(a.engine.logging_freq, b.engine.logging_freq);
  EXPECT_EQ(a.engine.eval_freq, b.engine.eval_freq);
  EXPECT_EQ(a.engine.eval_iters, b.engine.eval_iters);
  EXPECT_EQ(a.engine.save_steps, b.engine.save_steps);
  EXPECT_EQ(a.engine.output_dir, b.engine.output_dir);
  EXPECT_EQ(a.engine.mix_precision, b.engine.mix_precision);
  EXPECT_EQ(a.optimizer.lr, b.optimizer.lr);
  EXPECT_EQ(a.optimizer.min_lr, b.optimizer.min_lr);
  EXPECT_EQ(a.optimizer.warmup_steps, b.optimizer.warmup_steps);
  EXPECT_EQ(a.optimizer.decay_steps, b.optimizer.decay_steps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.grad_clip, b.optimizer.grad_clip);
  EXPECT_EQ(a.data.train_path, b.data.train_path);
  EXPECT_EQ(a.data.val_path, b.data.val_path);
  EXPECT_EQ(a.data.val_fraction, b.data.val_fraction);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.keep_last, b.checkpoint.keep_last);
  EXPECT_EQ(a.checkpoint.keep_every, b.checkpoint.keep_every);
  EXPECT_EQ(a.checkpoint.resume, b.checkpoint.resume);
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
  c.distributed = {3, 2, 4, 1, {10, 12, 13, 13}, true};
  c.engine = {12345, 7, 0, 9, 250, "out dir/with: colon # and hash", "fp32"};
  c.optimizer = {6e-4, 1.0 / 3.0, 700, 18000, 0.0, 0.8999999999999999, 0.999, 1e-12, 0.0};
  c.data = {"data/\"quoted\"\\back\tslash\n.h5", "", 0.05};
  c.checkpoint = {"/abs/ckpt", 0, 1000, "auto"};
  std::string text = FormatConfig(c);
  StatusOr<TrainConfig> back = LoadConfig(WriteFile("resolved.yaml", text), {});
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  ExpectSameConfig(back.value(), c);
  // All sections and keys, in AllConfigKeys order.
  size_t position = 0;
  for (const std::string& key : AllConfigKeys()) {
    std::string name = "\n  " + key.substr(key.find('.') + 1) + ": ";
    size_t found = text.find(name, position);
    EXPECT_NE(found, std::string::npos) << key << "\n" << text;
    position = found == std::string::npos ? position : found;
  }
  // Defaults too (empty strings, empty list, default doubles).
  StatusOr<TrainConfig> defaults = LoadConfig(WriteFile("d.yaml", FormatConfig(TrainConfig())), {});
  ASSERT_TRUE(defaults.ok()) << defaults.status().message();
  ExpectSameConfig(defaults.value(), TrainConfig());
}

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
  // Reserved features refuse to be switched on rather than being silently ignored.
  ExpectUsageError(
      ValidateWith({"Distributed.ep_degree=2", "Global.global_batch_size=8"}, 4),
      {"Distributed.ep_degree=2", "no MoE layers yet", "Set Distributed.ep_degree to 1"});
  ExpectUsageError(
      ValidateWith({"Distributed.zero_stage1=true", "Distributed.overlap_grad_reduce=true",
                    "Global.global_batch_size=8"},
                   2),
      {"Distributed.zero_stage1=true and Distributed.overlap_grad_reduce=true",
       "Set one of them to false"});
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
  ExpectUsageError(ValidateWith({"Model.hidden_size=66"}, 1),
                   {"Model.hidden_size=66 is not divisible by Model.num_heads=4",
                    "Set Model.hidden_size to a multiple of 4, e.g. 64"});
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
}

TEST(ConfigValidate, ChoicesAndRequiredStrings) {
  ExpectUsageError(ValidateWith({"Global.device=gpu"}, 1),
                   {"Global.device=\"gpu\" must be one of auto, cpu, cuda", "Set Global.device"});
  ExpectUsageError(ValidateWith({"Engine.mix_precision=fp16"}, 1),
                   {"Engine.mix_precision=\"fp16\" must be one of bf16, fp32"});
  ExpectUsageError(ValidateWith({"Model.recompute=full"}, 1),
                   {"Model.recompute=\"full\" must be one of none, gelu, block"});
  ExpectUsageError(ValidateWith({"Engine.output_dir="}, 1),
                   {"Engine.output_dir is empty", "Set it to a folder"});
  StatusOr<TrainConfig> defaults = LoadConfig("", {});
  ASSERT_TRUE(defaults.ok());
  ExpectUsageError(ValidateConfig(&defaults.value(), 1),
                   {"Data.train_path is empty (built-in defaults)", "-o Data.train_path="});
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

}  // namespace
}  // namespace trainer
