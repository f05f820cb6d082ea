// PipelineStage (pipeline.h): the 1F1B schedule, in the shape of Megatron-LM's
// forward_backward_pipelining_without_interleaving, with combined send/recv in the steady state.
#include "engine/pipeline.h"

#include <algorithm>

namespace trainer {

int PipelineStage::NumSlots(int stage, int num_stages, int micro_batches) {
  return std::max(1, std::min(num_stages - stage, micro_batches));
}

int PipelineStage::Slot(int mb, int micro_batches) const {
  return mb % NumSlots(stage(), stages(), micro_batches);
}

size_t PipelineStage::ActivationCount() const {
  return static_cast<size_t>(model_->OutputGradient().numel());
}

Status PipelineStage::Forward(const MicroBatches& mb, int i, float dloss_scale) {
  const bool last = stage() == stages() - 1;
  DropoutDraw draw = mb.dropout;
  draw.first_sample += static_cast<int64_t>(i) * mb.batch;
  model_->SetDropoutDraw(Slot(i, mb.count), draw);
  TRAINER_RETURN_IF_ERROR(model_->SetDocumentStarts(Slot(i, mb.count), mb.starts(i)));
  TRAINER_RETURN_IF_ERROR(
      model_->Forward(Slot(i, mb.count), mb.tokens(i), mb.labels(i), last, dloss_scale));
  return last ? model_->AccumulateLoss(i == 0) : Status::Ok();
}

Status PipelineStage::LossSum(double* loss_sum) {
  *loss_sum = 0.0;
  return stage() == stages() - 1 ? model_->LossSum(loss_sum) : Status::Ok();
}

Status PipelineStage::Backward(const MicroBatches& mb, int i) {
  // Every schedule ends each stage's step with the backward of the last micro-batch.
  return model_->Backward(Slot(i, mb.count), i == mb.count - 1 ? hook_ : nullptr);
}

Status PipelineStage::TrainStep(const MicroBatches& mb, float dloss_scale, PhaseTimer* timer) {
  const int s = stage(), P = stages(), M = mb.count;
  const bool first = s == 0, last = s == P - 1;
  const size_t n = ActivationCount();
  const DType dt = model_->OutputGradient().dtype;
  // Every call books its time with the timer (transfers only where there was one).
  auto timed = [&](Phase phase, const Status& status) {
    return status.ok() ? timer->Charge(phase) : status;
  };
  auto forward = [&](int i) { return timed(Phase::kForward, Forward(mb, i, dloss_scale)); };
  auto backward = [&](int i) { return timed(Phase::kBackward, Backward(mb, i)); };
  auto transfer = [&](const Status& status) { return timed(Phase::kPipelineTransfer, status); };
  auto recv_forward = [&](int i) {
    return first ? Status::Ok()
                 : transfer(pp_->Recv(model_->StageInput(Slot(i, M)).data, n, dt, s - 1));
  };
  auto send_forward = [&](int i) {
    return last ? Status::Ok()
                : transfer(pp_->Send(model_->StageOutput(Slot(i, M)).data, n, dt, s + 1));
  };
  auto recv_backward = [&]() {
    return last ? Status::Ok() : transfer(pp_->Recv(model_->OutputGradient().data, n, dt, s + 1));
  };
  auto send_backward = [&]() {
    return first ? Status::Ok() : transfer(pp_->Send(model_->OutputGradient().data, n, dt, s - 1));
  };

  const int warmup = std::min(P - 1 - s, M);
  const int steady = M - warmup;
  for (int i = 0; i < warmup; ++i) {
    TRAINER_RETURN_IF_ERROR(recv_forward(i));
    TRAINER_RETURN_IF_ERROR(forward(i));
    TRAINER_RETURN_IF_ERROR(send_forward(i));
  }
  if (steady > 0) TRAINER_RETURN_IF_ERROR(recv_forward(warmup));
  for (int i = 0; i < steady; ++i) {
    const int f = warmup + i;  // micro-batch going forward; i goes backward
    TRAINER_RETURN_IF_ERROR(forward(f));
    if (!last) {  // send this output, receive the gradient of micro-batch i
      TRAINER_RETURN_IF_ERROR(transfer(pp_->SendRecv(model_->StageOutput(Slot(f, M)).data, n, s + 1,
                                                     model_->OutputGradient().data, n, s + 1, dt)));
    }
    TRAINER_RETURN_IF_ERROR(backward(i));
    if (i == steady - 1) {
      TRAINER_RETURN_IF_ERROR(send_backward());
    } else if (!first) {  // send d(input) of i, receive the input of f + 1 (same slot as i)
      TRAINER_RETURN_IF_ERROR(
          transfer(pp_->SendRecv(model_->OutputGradient().data, n, s - 1,
                                 model_->StageInput(Slot(f + 1, M)).data, n, s - 1, dt)));
    }
  }
  for (int i = steady; i < M; ++i) {
    TRAINER_RETURN_IF_ERROR(recv_backward());
    TRAINER_RETURN_IF_ERROR(backward(i));
    TRAINER_RETURN_IF_ERROR(send_backward());
  }
  return Status::Ok();
}

Status PipelineStage::EvalStep(const MicroBatches& mb, double* loss_sum) {
  const int s = stage(), P = stages();
  const size_t n = ActivationCount();
  const DType dt = model_->OutputGradient().dtype;
  for (int i = 0; i < mb.count; ++i) {
    const int slot = 0;
    if (s > 0) TRAINER_RETURN_IF_ERROR(pp_->Recv(model_->StageInput(slot).data, n, dt, s - 1));
    const bool last = s == P - 1;
    model_->SetDropoutDraw(slot, DropoutDraw());  // off in evaluation
    TRAINER_RETURN_IF_ERROR(model_->SetDocumentStarts(slot, mb.starts(i)));
    TRAINER_RETURN_IF_ERROR(model_->Forward(slot, mb.tokens(i), mb.labels(i), last, 0.f));
    if (last) {
      TRAINER_RETURN_IF_ERROR(model_->AccumulateLoss(i == 0));
    } else {
      TRAINER_RETURN_IF_ERROR(pp_->Send(model_->StageOutput(slot).data, n, dt, s + 1));
    }
  }
  return LossSum(loss_sum);
}

}  // namespace trainer
