// What differs between two configs (config_diff.h): the key lines ranks compare, and the settings
// that change a resumed run's numbers, against hand-made configs.
#include "config/config_diff.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/train_config.h"

namespace trainer {
namespace {

// ---------------------------------------------------------------- ConfigKeyLines

TEST(ConfigKeyLines, NameEachDifferingKeyWithBothValues) {
  TrainConfig a;
  EXPECT_TRUE(DifferingKeyLines(ConfigKeyLines(a), ConfigKeyLines(a), "rank 0").empty());
  TrainConfig b = a;
  b.model.hidden_size = a.model.hidden_size + 32;
  b.checkpoint.resume = "auto";   // --resume on one rank only
  b.data.train_path = "x: y.h5";  // a value holding ": "
  const std::vector<std::string> differ =
      DifferingKeyLines(ConfigKeyLines(b), ConfigKeyLines(a), "rank 0");
  ASSERT_EQ(differ.size(), 3u);
  EXPECT_EQ(differ[0], "Model.hidden_size: " + std::to_string(b.model.hidden_size) + " here, " +
                           std::to_string(a.model.hidden_size) + " on rank 0");
  EXPECT_NE(differ[1].find("Data.train_path: \"x: y.h5\" here, "), std::string::npos) << differ[1];
  EXPECT_EQ(differ[2].rfind("Checkpoint.resume: \"auto\" here, ", 0), 0u) << differ[2];
  // Another tp_degree on one rank changes the derived dp_degree too: the key given comes first.
  TrainConfig c = a, d = a;
  c.distributed.dp_degree = 2;
  d.distributed.tp_degree = 2;
  d.distributed.dp_degree = 1;  // as validation derives them on 2 ranks
  const std::vector<std::string> layout =
      DifferingKeyLines(ConfigKeyLines(d), ConfigKeyLines(c), "rank 0");
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0], "Distributed.tp_degree: 2 here, 1 on rank 0");
  EXPECT_EQ(layout[1], "Distributed.dp_degree: 1 here, 2 on rank 0");
}

// ---------------------------------------------------------------- ChangedSettings

TEST(ChangedSettings, ListsWhatChangesTheNumbersAndNothingElse) {
  TrainConfig before;
  before.engine.max_steps = 100;
  before.optimizer.warmup_steps = 10;
  EXPECT_TRUE(ChangedSettings(before, before).empty());
  TrainConfig after = before;  // where outputs go, how often, the layout: not listed
  after.engine.output_dir = "elsewhere";
  after.engine.logging_freq = 1;
  after.engine.save_steps = 5;
  after.global.micro_batch_size = 1;
  after.distributed.tp_degree = 2;
  after.model.recompute = "block";
  after.checkpoint.keep_last = 9;
  after.data.val_path = "val.h5";
  after.optimizer.decay_steps = 90;  // the decay already in effect (100 - 10), now spelled out
  EXPECT_TRUE(ChangedSettings(before, after).empty());
  after.optimizer.lr = 2.5e-4;  // what the step computes: listed in FormatConfig's order
  after.global.seed = 7;
  after.data.train_path = "other.h5";
  const std::vector<std::string> expected = {"Global.seed 1234 -> 7",
                                             "Optimizer.lr 0.001 -> 0.00025",
                                             "Data.train_path \"\" -> \"other.h5\""};
  EXPECT_EQ(ChangedSettings(before, after), expected);
}

// The validation hold-out in effect: a val file given where val_fraction held out training
// samples changes the training set (and every sample's place in the order); val_fraction alone
// does nothing while a val file is given.
TEST(ChangedSettings, TheValidationHoldOutInEffect) {
  TrainConfig before;
  before.data.val_fraction = 0.05;
  TrainConfig after = before;
  after.data.val_path = "val.h5";
  const std::vector<std::string> changes = ChangedSettings(before, after);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].find("held out for validation"), std::string::npos) << changes[0];
  EXPECT_NE(changes[0].find("0.05 -> 0"), std::string::npos) << changes[0];
  TrainConfig other_fraction = after;  // val_path set on both sides: the fraction is unused
  other_fraction.data.val_fraction = 0.2;
  EXPECT_TRUE(ChangedSettings(after, other_fraction).empty());
}

TEST(ChangedSettings, TheDecayLengthInEffect) {
  TrainConfig before;
  before.engine.max_steps = 100;
  before.optimizer.warmup_steps = 10;
  TrainConfig longer = before;  // training longer moves the cosine decay's end
  longer.engine.max_steps = 200;
  ASSERT_EQ(ChangedSettings(before, longer).size(), 1u);
  EXPECT_NE(ChangedSettings(before, longer)[0].find(") 90 -> 190"), std::string::npos)
      << ChangedSettings(before, longer)[0];
  longer.optimizer.decay_steps = 90;  // unless the decay length is kept
  EXPECT_TRUE(ChangedSettings(before, longer).empty());
  TrainConfig constant = before;  // no decay: its length does not matter
  constant.optimizer.decay_style = "constant";
  TrainConfig constant_longer = constant;
  constant_longer.engine.max_steps = 200;
  EXPECT_TRUE(ChangedSettings(constant, constant_longer).empty());
}

// A MoE layer's capacity and its aux_loss count over each micro-batch's tokens: a changed
// micro-batch changes the numbers there (and only there).
TEST(ChangedSettings, TheMicroBatchWhereMoeCountsOverIt) {
  TrainConfig dense;
  TrainConfig dense_smaller = dense;
  dense_smaller.global.micro_batch_size = 1;
  EXPECT_TRUE(ChangedSettings(dense, dense_smaller).empty());
  TrainConfig moe = dense;
  moe.model.num_experts = 4;
  moe.model.moe_router_topk = 2;
  TrainConfig moe_smaller = moe;  // dropless, no aux loss: the micro-batch does not count
  moe_smaller.global.micro_batch_size = 1;
  EXPECT_TRUE(ChangedSettings(moe, moe_smaller).empty());
  for (const char* kind : {"capacity", "aux_loss", "seq_aux_loss"}) {
    TrainConfig before = moe;
    if (std::string(kind) == "capacity") {
      before.model.moe_expert_capacity_factor = 1.0;
    } else {
      before.model.moe_aux_loss_coeff = 0.01;
      before.model.moe_router_load_balancing_type = kind;
    }
    TrainConfig after = before;
    after.global.micro_batch_size = 1;
    const std::vector<std::string> changes = ChangedSettings(before, after);
    if (std::string(kind) == "seq_aux_loss") {  // over each sequence: any micro-batch
      EXPECT_TRUE(changes.empty()) << changes[0];
      continue;
    }
    ASSERT_EQ(changes.size(), 1u) << kind;
    EXPECT_EQ(changes[0].rfind("Global.micro_batch_size 2 -> 1 (", 0), 0u) << changes[0];
  }
}

}  // namespace
}  // namespace trainer
