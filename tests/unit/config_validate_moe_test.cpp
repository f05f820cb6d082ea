// ValidateConfig's mixture-of-experts rules (Model.moe_* keys, expert parallelism), one failing
// case per rule, asserting kUsage and the message's key and fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config_loader.h"
#include "config_test_util.h"

namespace trainer {
namespace {

using namespace config_testing;

TEST(ConfigValidate, MixtureOfExperts) {
  const std::string llama = "Model.arch=llama";
  ASSERT_TRUE(ValidateWith({llama, "Model.num_experts=8", "Model.moe_router_topk=2",
                            "Model.moe_router_bias_update_rate=0.001"},
                           1)
                  .ok());
  ExpectUsageError(ValidateWith({"Model.num_experts=4"}, 1),
                   {"Model.num_experts=4", "Model.arch=\"gpt2\"", "Set Model.arch=llama"});
  ExpectUsageError(ValidateWith({llama, "Model.num_experts=4", "Model.moe_router_topk=5"}, 1),
                   {"Model.moe_router_topk=5 exceeds Model.num_experts=4",
                    "Set Model.moe_router_topk to at most 4"});
  ExpectUsageError(ValidateWith({llama, "Model.num_experts=4", "Model.moe_first_k_dense=2"}, 1),
                   {"Model.moe_first_k_dense=2 and Model.moe_layer_freq=1 leave no MoE layer "
                    "among Model.num_layers=2",
                    "below 2"});
  // Layer 1 is past the dense ones but not a multiple of moe_layer_freq: no layer has experts.
  ExpectUsageError(
      ValidateWith(
          {llama, "Model.num_experts=4", "Model.moe_first_k_dense=1", "Model.moe_layer_freq=8"}, 1),
      {"Model.moe_first_k_dense=1 and Model.moe_layer_freq=8 leave no MoE layer",
       "(the first would be layer 8)", "Model.num_experts=0"});
  EXPECT_TRUE(ValidateWith({llama, "Model.num_experts=4", "Model.num_layers=3",
                            "Model.moe_first_k_dense=1", "Model.moe_layer_freq=2"},
                           1)
                  .ok());
  ExpectUsageError(
      ValidateWith({llama, "Model.num_experts=4", "Model.moe_router_score_function=relu"}, 1),
      {"Model.moe_router_score_function=\"relu\" must be one of softmax, sigmoid"});
  EXPECT_TRUE(ValidateWith({llama, "Model.num_experts=4", "Global.device=cuda",
                            "Model.moe_router_bias_update_rate=0.001"},
                           1)
                  .ok());
  ExpectUsageError(ValidateWith({llama, "Model.num_experts=4", "Model.moe_aux_loss_coeff=-1"}, 1),
                   {"Model.moe_aux_loss_coeff=-1.0 must be >= 0"});
  // The experts' settings on a dense model: refused, not silently ignored; each one on its own.
  for (const char* setting :
       {"Model.moe_router_topk=9", "Model.moe_ffn_hidden_size=64",
        "Model.moe_shared_expert_intermediate_size=64", "Model.moe_layer_freq=2",
        "Model.moe_first_k_dense=1", "Model.moe_router_score_function=sigmoid",
        "Model.moe_router_pre_softmax=false", "Model.moe_norm_topk_prob=true",
        "Model.moe_aux_loss_coeff=0.01", "Model.moe_router_load_balancing_type=seq_aux_loss",
        "Model.moe_z_loss_coeff=0.001", "Model.moe_expert_capacity_factor=1.25",
        "Model.moe_router_bias_update_rate=0.001"}) {
    const std::string key(setting, std::string(setting).find('='));
    ExpectUsageError(ValidateWith({llama, setting}, 1),
                     {key + "=", " is a mixture-of-experts setting, and Model.num_experts=0",
                      "Set Model.num_experts (e.g. 8)", "leave " + key + " at its default"});
  }
  // Expert parallelism: experts split evenly over EP, EP carved out of the DP ranks.
  EXPECT_TRUE(ValidateWith({llama, "Model.num_experts=4", "Distributed.ep_degree=2"}, 4).ok());
  ExpectUsageError(ValidateWith({llama, "Model.num_experts=6", "Distributed.ep_degree=4"}, 4),
                   {"the 6 experts (Model.num_experts) are not divisible by "
                    "Distributed.ep_degree=4"});
  ExpectUsageError(
      ValidateWith(
          {llama, "Model.num_experts=4", "Distributed.ep_degree=4", "Distributed.tp_degree=2"}, 4),
      {"Distributed.ep_degree=4 does not divide dp_degree=2"});
  // The data ranks held by sharding: the fix names the sharding degree that frees the replicas.
  ExpectUsageError(
      ValidateWith({llama, "Model.num_experts=6", "Distributed.ep_degree=3",
                    "Distributed.sharding.sharding_degree=3"},
                   3),
      {"Distributed.ep_degree=3 does not divide dp_degree=1", "divisor of 1",
       "or keep it and set Distributed.sharding.sharding_degree=1 (dp_degree becomes 3"});
  ExpectUsageError(
      ValidateWith({llama, "Model.num_experts=4", "Distributed.ep_degree=2",
                    "Distributed.sharding.sharding_degree=4"},
                   4),
      {"or keep it and set Distributed.sharding.sharding_degree=2 (dp_degree becomes 2"});
  // On GPUs only over host-staged collectives (NCCL's all-to-all is not validated yet).
  ExpectUsageError(
      ValidateWith({llama, "Model.num_experts=4", "Distributed.ep_degree=2", "Global.device=cuda"},
                   4),
      {"Distributed.ep_degree=2: expert parallelism on GPUs runs over host-staged",
       "Set Distributed.gpu_collectives=mpi"});
  EXPECT_TRUE(ValidateWith({llama, "Model.num_experts=4", "Distributed.ep_degree=2",
                            "Global.device=cuda", "Distributed.gpu_collectives=mpi"},
                           4)
                  .ok());
  // With sharding: EP splits the replicas (dp_degree), at every sharding stage.
  for (const char* stage : {"1", "2", "3"})
    EXPECT_TRUE(ValidateWith({llama, "Model.num_experts=4", "Distributed.ep_degree=2",
                              "Distributed.sharding.sharding_degree=2",
                              std::string("Distributed.sharding.sharding_stage=") + stage},
                             4)
                    .ok());
  ExpectUsageError(
      ValidateWith(
          {llama, "Model.num_experts=4", "Distributed.ep_degree=2", "Distributed.zero_stage1=true"},
          2),
      {"Distributed.zero_stage1=true shards over all 2 data-parallel ranks, "
       "leaving one replica, and Distributed.ep_degree=2 splits the experts",
       "Set Distributed.zero_stage1=false and Distributed.sharding.sharding_degree=1"});
  ExpectUsageError(ValidateWith({llama, "Model.num_experts=4", "Distributed.ep_degree=2",
                                 "Distributed.zero_stage1=true", "Global.global_batch_size=8"},
                                4),
                   {"Distributed.zero_stage1=true", "Distributed.ep_degree=2",
                    "Distributed.sharding.sharding_degree=2 (2 replicas for the experts)"});
  // With dp_degree given the suggestion names the dp_degree that goes with it, and works.
  const std::vector<std::string> moe = {llama, "Model.num_experts=4", "Distributed.ep_degree=2",
                                        "Global.global_batch_size=8"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), moe.begin(), moe.end());
    return ValidateWith(more, 4);
  };
  ExpectUsageError(with({"Distributed.zero_stage1=true", "Distributed.dp_degree=4"}),
                   {"Set Distributed.zero_stage1=false and Distributed.sharding.sharding_degree=2 "
                    "with Distributed.dp_degree=2 (2 replicas for the experts)"});
  EXPECT_TRUE(with({"Distributed.sharding.sharding_degree=2", "Distributed.dp_degree=2"}).ok());
}

// Sizes past 2^50 elements are refused before any count can overflow: the dense weights, and
// the experts' (which the bound left out: 2^20 experts wrapped the plan's 64-bit count).

}  // namespace
}  // namespace trainer
