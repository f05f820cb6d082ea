// GptModel under Data.packing: documents (gpt.h): each slot's document starts, on the device
// beside its tokens, which every block's attention and RoPE read (BlockContext::doc_starts).
#include "model/gpt.h"

namespace trainer {

Status GptModel::SetDocumentStarts(int slot, const int32_t* doc_starts) {
  Slot& s = slots_[slot];
  s.documents = doc_starts != nullptr;
  if (!s.documents) return Status::Ok();
  return backend_->CopyToDevice(s.doc_starts.data, doc_starts,
                                static_cast<size_t>(B_) * T_ * sizeof(int32_t));
}

}  // namespace trainer
