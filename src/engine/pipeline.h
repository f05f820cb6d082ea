// The pipeline schedule for one optimizer step: 1F1B (warm-up forwards, steady one-forward-
// one-backward, cool-down backwards) over the micro-batches, with activations and their gradients
// passed between neighbouring stages through the PP communicator. With one stage it is plain
// gradient accumulation. Also the forward-only pass used by evaluation.
#pragma once

#include <cstdint>
#include <vector>

#include "common/communicator.h"
#include "engine/phase_timer.h"
#include "model/gpt.h"

namespace trainer {

struct MicroBatches {
  int count = 0;
  int batch = 0, seq_len = 0;
  const int32_t* inputs = nullptr;   // (count*batch, T) host
  const int32_t* targets = nullptr;  // (count*batch, T) host
  // Training: the dropout draw of micro-batch 0 (its first_sample; micro-batch i starts
  // i * batch samples later). Evaluation never drops.
  DropoutDraw dropout;
  // Data.packing: documents: (count*batch, T) host document starts (every stage), else null.
  const int32_t* doc_starts = nullptr;
  const int32_t* tokens(int mb) const { return inputs + static_cast<size_t>(mb) * batch * seq_len; }
  const int32_t* starts(int mb) const {
    return doc_starts ? doc_starts + static_cast<size_t>(mb) * batch * seq_len : nullptr;
  }
  const int32_t* labels(int mb) const {
    return targets + static_cast<size_t>(mb) * batch * seq_len;
  }
};

class PipelineStage {
 public:
  // pp may be null (one stage). slots: the model's activation slots (NumSlots()).
  PipelineStage(GptModel* model, Communicator* pp) : model_(model), pp_(pp) {}

  // Activation slots this stage needs for `micro_batches` micro-batches in flight under 1F1B.
  static int NumSlots(int stage, int num_stages, int micro_batches);

  // Forward and backward of every micro-batch; gradients accumulate in the model, and on the last
  // stage the per-token losses add up on the device (LossSum reads them). `timer` books the
  // forward, backward and transfer time. Nothing here waits for the GPU's results.
  Status TrainStep(const MicroBatches& mb, float dloss_scale, PhaseTimer* timer);
  // The last step's sum of per-token losses on the last stage, 0 elsewhere (waits for the device).
  Status LossSum(double* loss_sum);
  // Called after each block's backward of the step's last micro-batch (see GptModel::Backward).
  void set_last_backward_hook(std::function<Status(int)> hook) { hook_ = std::move(hook); }
  // Forward only, with the loss on the last stage.
  Status EvalStep(const MicroBatches& mb, double* loss_sum);

 private:
  int stage() const { return pp_ ? pp_->rank() : 0; }
  int stages() const { return pp_ ? pp_->size() : 1; }
  int Slot(int mb, int micro_batches) const;
  size_t ActivationCount() const;
  Status Forward(const MicroBatches& mb, int i, float dloss_scale);
  Status Backward(const MicroBatches& mb, int i);

  GptModel* model_;
  Communicator* pp_;
  std::function<Status(int)> hook_;
};

}  // namespace trainer
