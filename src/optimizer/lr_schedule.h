// Learning-rate schedule: linear warmup to Optimizer.lr, then (Optimizer.decay_style) a cosine or
// linear decay to Optimizer.min_lr over decay_steps (default: the remaining steps), then min_lr;
// or a constant Optimizer.lr.
#pragma once

#include <cmath>

#include "config/train_config.h"

namespace trainer {

// step is 1-based (the step being taken).
inline double LearningRate(const OptimizerConfig& o, int max_steps, int step) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps)
    return o.lr * static_cast<double>(step) / o.warmup_steps;
  const int decay = o.decay_steps > 0 ? o.decay_steps : max_steps - o.warmup_steps;
  if (decay <= 0 || o.decay_style == "constant") return o.lr;
  const double progress = static_cast<double>(step - o.warmup_steps) / decay;
  if (progress >= 1.0) return o.min_lr;
  const double remaining =
      o.decay_style == "linear" ? 1.0 - progress : 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.min_lr + (o.lr - o.min_lr) * remaining;
}

}  // namespace trainer
