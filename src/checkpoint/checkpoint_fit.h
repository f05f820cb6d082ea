// Internal to src/checkpoint: whether a checkpoint file's weights fit the config's model, checked
// before any tensor is read; each mismatch is one error naming the Model keys (or the tensor)
// and the fix.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "config/train_config.h"
#include "model/parameters.h"

namespace trainer {

// The kind of weights (a model's or LoRA adapters), the model shape (the file's shape attributes,
// and the mixture-of-experts keys that shape its tensors, from its /config), and no tensor the
// model has no place for: `params` are the parameters the config's model trains.
Status CheckWeightsFit(hid_t file_id, const std::string& file, const ModelConfig& config,
                       const std::vector<ParameterInfo>& params);

}  // namespace trainer
