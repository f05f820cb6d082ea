// Settings that differ between two configs (config_diff.h), compared as FormatConfig prints them,
// so that both sides format their values the same way.
#include "config/config_diff.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>

#include "common/log.h"
#include "config/config_loader.h"

namespace trainer {
namespace {

// Keys that do not change what a step computes (beyond the order of a sum).
const std::set<std::string>& Unweighed() {
  static const std::set<std::string> keys = {
      "Global.micro_batch_size", "Model.recompute",     "Model.sequence_parallel",
      "Engine.max_steps",        "Engine.logging_freq", "Engine.eval_freq",
      "Engine.eval_iters",       "Engine.save_steps",   "Engine.output_dir",
      "Engine.watchdog_s",       "Engine.tensorboard",  "Engine.profile",
      "Engine.peak_tflops",      "Data.val_path",       "Optimizer.decay_steps"};
  return keys;
}
bool Weighed(const std::string& key) {
  return key.rfind("Distributed.", 0) != 0 && key.rfind("Checkpoint.", 0) != 0 &&
         Unweighed().count(key) == 0;
}

// FormatConfig's text as ("Section.key", "value") pairs, in order.
std::vector<std::pair<std::string, std::string>> KeyValues(const TrainConfig& config) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(FormatConfig(config));
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ') {
      section = line.substr(0, line.find(':'));
      continue;
    }
    const size_t start = line.find_first_not_of(' '), colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t value = line.find_first_not_of(' ', colon + 1);
    out.emplace_back(section + "." + line.substr(start, colon - start),
                     value == std::string::npos ? "" : line.substr(value));
  }
  return out;
}

// Steps of cosine decay after the warmup (0: none, the rate stays at Optimizer.lr).
int DecayInEffect(const TrainConfig& c) {
  if (c.optimizer.decay_steps > 0) return c.optimizer.decay_steps;
  return std::max(0, c.engine.max_steps - c.optimizer.warmup_steps);
}

}  // namespace

std::vector<std::string> ChangedSettings(const TrainConfig& before, const TrainConfig& after) {
  std::vector<std::string> changes;
  const auto a = KeyValues(before), b = KeyValues(after);
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i].first == b[i].first && a[i].second != b[i].second && Weighed(a[i].first))
      changes.push_back(a[i].first + " " + a[i].second + " -> " + b[i].second);
  if (DecayInEffect(before) != DecayInEffect(after))
    changes.push_back(
        StrFormat("the cosine decay length (Optimizer.decay_steps, or when 0 Engine.max_steps - "
                  "Optimizer.warmup_steps) %d -> %d",
                  DecayInEffect(before), DecayInEffect(after)));
  return changes;
}

}  // namespace trainer
