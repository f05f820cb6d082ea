// Settings that differ between two configs (config_diff.h), each value formatted as FormatConfig
// prints it (the key table's FormatField), so that both sides read the same way.
#include "config/config_diff.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/log.h"
#include "config/config_keys.h"

namespace trainer {
namespace {

// Keys that do not change what a step computes (beyond the order of a sum).
const std::set<std::string>& Unweighed() {
  static const std::set<std::string> keys = {
      "Global.micro_batch_size", "Model.recompute",          "Model.sequence_parallel",
      "Engine.max_steps",        "Engine.logging_freq",      "Engine.eval_freq",
      "Engine.eval_iters",       "Engine.save_steps",        "Engine.output_dir",
      "Engine.watchdog_s",       "Engine.tensorboard",       "Engine.profile",
      "Engine.peak_tflops",      "Engine.exit_duration_min", "Data.val_path",
      "Data.val_fraction",       "Optimizer.decay_steps",    "Engine.gpu_routes",
      "Model.loss_chunk_tokens"};
  return keys;
}
bool Weighed(const std::string& key) {
  return key.rfind("Distributed.", 0) != 0 && key.rfind("Checkpoint.", 0) != 0 &&
         Unweighed().count(key) == 0;
}

// Each key's value as FormatConfig prints it, in its order.
std::vector<std::pair<std::string, std::string>> KeyValues(TrainConfig config) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ConfigKey& key : ConfigKeyTable())
    out.emplace_back(key.full_name(), FormatField(key.field(config)));
  return out;
}

// The share of the training files held out for validation: Data.val_fraction, unless a
// validation file is given (Data.val_path). A change moves samples into or out of training,
// and with them every sample's place in the epoch's order.
double HeldOut(const TrainConfig& c) { return c.data.val_path.empty() ? c.data.val_fraction : 0.0; }

// Steps of decay after the warmup (0: none, the rate stays at Optimizer.lr).
int DecayInEffect(const TrainConfig& c) {
  if (c.optimizer.decay_style == "constant") return 0;
  if (c.optimizer.decay_steps > 0) return c.optimizer.decay_steps;
  return std::max(0, c.engine.max_steps - c.optimizer.warmup_steps);
}

// What a MoE layer counts over each micro-batch's tokens: which tokens a capacity drops, and the
// aux_loss kind of load-balancing loss ("" where neither applies).
std::string PerMicroBatchMoe(const ModelConfig& m) {
  if (!m.moe()) return "";
  std::string what;
  if (m.moe_expert_capacity_factor > 0) what = "Model.moe_expert_capacity_factor's drops";
  if (m.moe_aux_loss_coeff > 0 && m.moe_router_load_balancing_type == "aux_loss")
    what += std::string(what.empty() ? "" : " and ") + "the aux_loss load-balancing loss";
  return what;
}

}  // namespace

std::vector<std::string> DifferingKeys(const TrainConfig& a, const TrainConfig& b,
                                       const std::string& prefix) {
  std::vector<std::string> keys;
  const auto x = KeyValues(a), y = KeyValues(b);  // the same keys, in the same order
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].first.rfind(prefix, 0) == 0 && x[i].second != y[i].second) keys.push_back(x[i].first);
  return keys;
}

std::vector<std::string> DefaultOverrides(const std::vector<std::string>& keys) {
  std::vector<std::string> overrides;
  for (const auto& [key, value] : KeyValues(TrainConfig()))
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      overrides.push_back(key + "=" + value);
  return overrides;
}

std::vector<std::string> ChangedSettings(const TrainConfig& before, const TrainConfig& after) {
  std::vector<std::string> changes;
  const auto a = KeyValues(before), b = KeyValues(after);  // the same keys, in the same order
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].second != b[i].second && Weighed(a[i].first))
      changes.push_back(a[i].first + " " + a[i].second + " -> " + b[i].second);
  if (HeldOut(before) != HeldOut(after))
    changes.push_back(StrFormat(
        "the training files' share held out for validation (Data.val_fraction, 0 when "
        "Data.val_path is set) %g -> %g: the training samples and their order change",
        HeldOut(before), HeldOut(after)));
  const std::string per_micro_batch = PerMicroBatchMoe(after.model);
  if (before.global.micro_batch_size != after.global.micro_batch_size && !per_micro_batch.empty())
    changes.push_back(StrFormat("Global.micro_batch_size %d -> %d (%s count over each "
                                "micro-batch's tokens)",
                                before.global.micro_batch_size, after.global.micro_batch_size,
                                per_micro_batch.c_str()));
  if (DecayInEffect(before) != DecayInEffect(after))
    changes.push_back(
        StrFormat("the decay length (Optimizer.decay_steps, or when 0 Engine.max_steps - "
                  "Optimizer.warmup_steps) %d -> %d",
                  DecayInEffect(before), DecayInEffect(after)));
  return changes;
}

std::string ConfigKeyLines(const TrainConfig& config) {
  std::string text;
  for (const auto& [key, value] : KeyValues(config)) text += key + ": " + value + "\n";
  return text;
}

std::vector<std::string> DifferingKeyLines(const std::string& mine, const std::string& theirs,
                                           const std::string& where) {
  const auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find('\n', at), text.size());
      out.push_back(text.substr(at, end - at));
      at = end + 1;
    }
    return out;
  };
  const std::vector<std::string> a = lines(mine), b = lines(theirs);
  std::vector<std::string> out;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string here = i < a.size() ? a[i] : "", there = i < b.size() ? b[i] : "";
    if (here == there) continue;
    const size_t colon = here.find(": ");
    if (colon == std::string::npos || there.compare(0, colon + 2, here, 0, colon + 2) != 0) {
      out.push_back("'" + here + "' here, '" + there + "' on " + where);  // another key table
      continue;
    }
    out.push_back(StrFormat("%s: %s here, %s on %s", here.substr(0, colon).c_str(),
                            here.substr(colon + 2).c_str(), there.substr(colon + 2).c_str(),
                            where.c_str()));
  }
  // Distributed.dp_degree follows from the world and the other degrees unless set: where a rank
  // was given another tp_degree or pp_degree, that key is the one to name first.
  std::stable_partition(out.begin(), out.end(), [](const std::string& line) {
    return line.rfind("Distributed.dp_degree: ", 0) != 0;
  });
  return out;
}

}  // namespace trainer
