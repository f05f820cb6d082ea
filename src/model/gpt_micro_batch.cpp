// GptModel (gpt.h): what one micro-batch brings besides its tokens, kept per activation slot
// and read by every block through the slot's BlockContext: its dropout draw (the keys of
// Model.hidden_dropout, attention_dropout and lora_dropout) and, under Data.packing: documents,
// its (B,T) document starts on the device, which attention and RoPE read.
#include "model/gpt.h"

namespace trainer {

Status GptModel::SetDocumentStarts(int slot, const int32_t* doc_starts) {
  Slot& s = slots_[slot];
  s.documents = doc_starts != nullptr;
  if (!s.documents) return Status::Ok();
  s.document_shape = MeasureDocuments(doc_starts, B_, T_);
  return backend_->CopyToDevice(s.doc_starts.data, doc_starts,
                                static_cast<size_t>(B_) * T_ * sizeof(int32_t));
}

BlockContext GptModel::Context(int slot) const {
  BlockContext ctx = Context();
  if (slots_[slot].documents) {
    ctx.doc_starts = slots_[slot].doc_starts;
    ctx.documents = slots_[slot].document_shape;
  }
  const DropoutDraw& d = slots_[slot].dropout;
  if (!d.on) return ctx;
  for (DropoutKey* k : {&ctx.hidden_dropout, &ctx.attention_dropout, &ctx.lora.dropout}) {
    k->seed = d.seed;
    k->step = d.step;
    k->first_sample = d.first_sample;
    k->seq_len = T_;
  }
  ctx.hidden_dropout.p = static_cast<float>(config_.hidden_dropout);
  ctx.attention_dropout.p = static_cast<float>(config_.attention_dropout);
  ctx.lora.dropout.p = static_cast<float>(config_.lora_dropout);
  return ctx;
}

}  // namespace trainer
