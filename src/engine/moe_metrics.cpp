// The MoE layers' step figures over the world (moe_metrics.h).
#include "engine/moe_metrics.h"

#include <algorithm>

namespace trainer {

Status UpdateExpertBias(const GptModel& model, const ParallelGroups& groups, double rate,
                        AdamW* optimizer) {
  const int E = model.spec().moe.num_experts, L = static_cast<int>(model.spec().layers);
  const ModelPartition& part = model.partition();
  const std::vector<MoeLayerStats>& stats = model.moe_stats();
  // (L, E) loads of the whole model, each stage's layers from its TP rank 0: summed over the world
  // they are each layer's loads over the DP ranks (integers in f64: exact in any order).
  std::vector<double> load(static_cast<size_t>(L) * E, 0.0);
  if (groups.coord.tp == 0)
    for (int i = 0; i < part.num_layers; ++i)
      for (size_t e = 0; e < stats[i].load.size(); ++e)
        load[static_cast<size_t>(part.first_layer + i) * E + e] =
            static_cast<double>(stats[i].load[e]);
  if (groups.world_host != nullptr && groups.world_host->size() > 1)
    TRAINER_RETURN_IF_ERROR(
        groups.world_host->AllReduce(load.data(), load.size(), DType::kF64, ReduceOp::kSum));
  for (int i = 0; i < part.num_layers; ++i) {
    const ParameterInfo* p = model.Find(ParamRole::kExpertBias, part.first_layer + i);
    if (p == nullptr) continue;  // a dense layer
    const double* l = load.data() + static_cast<size_t>(part.first_layer + i) * E;
    double mean = 0;
    for (int e = 0; e < E; ++e) mean += l[e] / E;
    std::vector<float> delta(E);
    for (int e = 0; e < E; ++e)
      delta[e] = static_cast<float>(rate * ((l[e] < mean) - (l[e] > mean)));
    TRAINER_RETURN_IF_ERROR(optimizer->AddToParameters(p->offset, delta));
  }
  return Status::Ok();
}

Status AppendMoeMetrics(const GptModel& model, const ParallelGroups& groups, int micro_batches,
                        std::vector<std::pair<std::string, double>>* record) {
  const ModelSpec& spec = model.spec();
  const int E = spec.moe.num_experts, L = static_cast<int>(spec.layers);
  // [aux, z, then per layer of the whole model: E loads and the dropped tokens], summed over the
  // world from TP rank 0 of each (DP, PP) position (TP ranks hold the same figures).
  const size_t per_layer = static_cast<size_t>(E) + 1;
  std::vector<double> sums(2 + per_layer * L, 0.0);
  if (groups.coord.tp == 0) {
    const ModelPartition& part = model.partition();
    const std::vector<MoeLayerStats>& stats = model.moe_stats();
    for (int i = 0; i < part.num_layers; ++i) {
      const MoeLayerStats& st = stats[i];
      sums[0] += st.aux_loss;
      sums[1] += st.z_loss;
      double* layer = sums.data() + 2 + per_layer * (part.first_layer + i);
      for (size_t e = 0; e < st.load.size(); ++e) layer[e] += static_cast<double>(st.load[e]);
      layer[E] += static_cast<double>(st.dropped);
    }
  }
  TRAINER_RETURN_IF_ERROR(
      groups.world_host->AllReduce(sums.data(), sums.size(), DType::kF64, ReduceOp::kSum));
  record->emplace_back("moe_aux_loss", sums[0] / micro_batches);
  record->emplace_back("moe_z_loss", sums[1] / micro_batches);
  for (int l = 0; l < L; ++l) {
    if (!spec.moe_layer(l)) continue;
    const double* layer = sums.data() + 2 + per_layer * l;
    double total = 0;
    for (int e = 0; e < E; ++e) total += layer[e];
    const double mean = std::max(total / E, 1e-30);
    const std::string suffix = "_l" + std::to_string(l);
    record->emplace_back("moe_load_max" + suffix, *std::max_element(layer, layer + E) / mean);
    record->emplace_back("moe_load_min" + suffix, *std::min_element(layer, layer + E) / mean);
    record->emplace_back("moe_dropped" + suffix, layer[E]);
  }
  return Status::Ok();
}

}  // namespace trainer
