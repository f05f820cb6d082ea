// The MoE layers' step-level work in the engine. The expert bias update (DeepSeek-V3's
// aux-loss-free balancing) after each optimizer step; and the figures of a training step for
// metrics.jsonl and TensorBoard: the
// load-balancing and z losses (summed over the MoE layers, averaged over the global batch's
// micro-batches: the amounts the objective adds to the language-model loss), and each MoE layer's
// expert load over the global batch (the busiest and the idlest expert's tokens over the mean)
// and the tokens its capacity dropped.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/parallel_groups.h"
#include "common/status.h"
#include "model/gpt.h"
#include "optimizer/adamw.h"

namespace trainer {

// Every rank calls it (a world all-reduce); `record` gains moe_aux_loss, moe_z_loss, and
// moe_load_max_l<i>, moe_load_min_l<i>, moe_dropped_l<i> for each MoE layer i of the model.
// `micro_batches` is the global batch's count (Global.global_batch_size / micro_batch_size).
// Model.moe_router_bias_update_rate: each MoE layer's expert bias += rate * sign(mean load -
// load of the expert), the loads (tokens that chose each expert) summed over the step's global
// batch (over the world in host memory, from TP rank 0 of each DP and PP position: the DP group
// moves device memory on GPUs). Every rank calls it after the optimizer step, before the next
// forward.
Status UpdateExpertBias(const GptModel& model, const ParallelGroups& groups, double rate,
                        AdamW* optimizer);

Status AppendMoeMetrics(const GptModel& model, const ParallelGroups& groups, int micro_batches,
                        std::vector<std::pair<std::string, double>>* record);

}  // namespace trainer
