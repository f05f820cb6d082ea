// AdamW with fp32 master weights and moments (decoupled weight decay; no decay on biases and
// LayerNorm parameters, which sit after the decayed ones in the flat buffer), and the global
// gradient norm that counts each replicated parameter once.
#pragma once

#include <vector>

#include "common/communicator.h"
#include "model/gpt.h"

namespace trainer {

class AdamW {
 public:
  static Status Create(GptModel* model, const OptimizerConfig& config, std::unique_ptr<AdamW>* out);
  ~AdamW();

  // Set master weights (host f32, buffer order) and the model's compute copy from them.
  Status SetMaster(const std::vector<float>& flat);
  // Host copies of the state for checkpoints: which = 0 master, 1 first moment, 2 second moment.
  Status Download(int which, std::vector<float>* flat) const;
  Status Upload(int which, const std::vector<float>& flat);

  // Squared L2 norm of this rank's canonical gradients (sum over ranks to get the global one).
  Status LocalGradNormSquared(double* out) const;
  // One step with learning rate lr; gradients are multiplied by grad_scale first (clipping).
  Status Step(int step, double lr, float grad_scale);

 private:
  AdamW() = default;
  GptModel* model_ = nullptr;
  OptimizerConfig config_;
  Tensor master_, m_, v_;
  size_t total_ = 0, first_no_decay_ = 0;
  // Contiguous [begin, end) element ranges of canonical parameters, for the norm.
  std::vector<std::pair<size_t, size_t>> canonical_spans_;
  std::vector<void*> allocations_;
};

}  // namespace trainer
