// AdamW with its state offloaded (Distributed.sharding.sharding_offload, adamw.h): the master
// weights and moments of this rank's shard live in host memory, owned by a CPU backend (12 bytes
// per element). The step streams the shard through a ring of staging buffers, chunk by chunk:
// chunk i's gradients are copied to ring slot i % slots, the CPU backend's (vectorised, OpenMP)
// AdamW updates the chunk's state there and writes its weights, which go back, in the model's
// compute dtype, into the model's pieces; then the usual gather of the units kept whole.
//
// The copies are queued in the model backend's stream order (asynchronous on a GPU, from
// page-locked memory) with a copy mark per slot, so that while the CPU updates chunk i the
// device copies chunk i+1's gradients down and chunk i-1's weights up:
//
//   queue gradients of chunks 0 .. slots-1, each followed by its slot's mark
//   for each chunk i (slot s = i % slots):
//     wait for mark s               (chunk i's gradients are here; slot s's last weights left)
//     AdamW on chunk i, convert its weights to the compute dtype
//     queue chunk i's weights up; queue chunk i+slots's gradients into slot s; mark s
//
// Every element is updated by the same arithmetic as without chunks (AdamW and the conversion
// are elementwise), so the chunk size changes no bit. The clipping scale comes from the host
// (the trainer computes the norm on the host whenever the state is offloaded).
#include <algorithm>

#include "common/check.h"
#include "optimizer/adamw.h"

namespace trainer {
namespace {

char* At(const Tensor& t, size_t index) {
  return static_cast<char*>(t.data) + index * DTypeSize(t.dtype);
}

size_t ShardElements(const std::vector<ParameterInfo>& params, int shards) {
  return FlatBufferElements(params, shards) / static_cast<size_t>(shards);
}

// Elements of a ring slot, and the number of slots, for a shard of n elements.
size_t SlotElements(size_t n, size_t chunk) {
  return std::min(n, chunk);
}
int RingSlots(size_t n, size_t chunk) {
  const size_t chunks = (n + chunk - 1) / chunk;
  return static_cast<int>(std::min<size_t>(AdamW::kOffloadRingSlots, std::max<size_t>(chunks, 1)));
}

}  // namespace

size_t AdamW::OffloadedBytes(const std::vector<ParameterInfo>& params, int shards,
                             DType compute_dtype, size_t offload_chunk) {
  const size_t n = ShardElements(params, shards), slot = SlotElements(n, offload_chunk);
  // Master weights and two moments; per ring slot the gradients and weights (f32) and the
  // weights' compute-dtype copy where that is not f32.
  size_t per_slot = 2 * Backend::AllocationSize(slot * sizeof(float));
  if (compute_dtype != DType::kF32)
    per_slot += Backend::AllocationSize(slot * DTypeSize(compute_dtype));
  return 3 * Backend::AllocationSize(n * sizeof(float)) + RingSlots(n, offload_chunk) * per_slot;
}

size_t AdamW::OffloadPeakBytes() const {
  return host_ ? host_->PeakAllocatedBytes() : 0;
}

Status AdamW::SetUpOffload(size_t chunk) {
  TRAINER_ASSERT(chunk > 0, "offload chunk of 0 elements");
  chunk_ = chunk;
  Backend* be = model_->backend();
  // A GPU's copies need page-locked host memory to run asynchronously; a CPU rank's ring is
  // plain host memory, counted with the state.
  ring_backend_ = be->device_memory() ? be : host_.get();
  const DType compute = model_->parameter_buffer().dtype;
  const size_t slot = SlotElements(shard_size_, chunk);
  auto allocate = [&](DType dtype, Tensor* t) -> Status {
    void* p = nullptr;
    TRAINER_RETURN_IF_ERROR(ring_backend_->AllocateHost(slot * DTypeSize(dtype), &p));
    ring_allocations_.push_back(p);
    *t = Tensor(p, dtype, {static_cast<int64_t>(slot)});
    return Status::Ok();
  };
  ring_.resize(static_cast<size_t>(RingSlots(shard_size_, chunk)));
  for (RingSlot& r : ring_) {
    TRAINER_RETURN_IF_ERROR(allocate(DType::kF32, &r.grads));
    TRAINER_RETURN_IF_ERROR(allocate(DType::kF32, &r.params));
    if (compute != DType::kF32) TRAINER_RETURN_IF_ERROR(allocate(compute, &r.compute));
  }
  // The update's segments: the shard's pieces of each run of equal weight decay.
  const ShardLayout& layout = model_->shard_layout();
  for (const auto& [span, decayed] : decay_spans_)
    layout.ForEachOwned(span.first, span.second, [&](int, size_t, size_t to, size_t n) {
      segments_.push_back({to, n, decayed});
    });
  std::sort(segments_.begin(), segments_.end(),
            [](const Segment& a, const Segment& b) { return a.to < b.to; });
  return Status::Ok();
}

template <typename Fn>
void AdamW::ForEachPieceInChunk(size_t chunk, Fn fn) const {
  const size_t lo = chunk * chunk_, hi = std::min(shard_size_, lo + chunk_);
  const ShardLayout& layout = model_->shard_layout();
  for (int u = 0; u < static_cast<int>(layout.units().size()); ++u) {
    const size_t begin = layout.units()[u].shard_offset, end = begin + layout.piece(u);
    const size_t a = std::max(lo, begin), b = std::min(hi, end);
    if (a < b) fn(u, a, b - a);
  }
}

Status AdamW::QueueChunkGradients(size_t chunk) {
  Backend* be = model_->backend();
  const int slot = static_cast<int>(chunk % ring_.size());
  const size_t lo = chunk * chunk_;
  const ShardLayout& layout = model_->shard_layout();
  Status status;
  ForEachPieceInChunk(chunk, [&](int u, size_t at, size_t n) {
    if (status.ok())
      status = be->CopyToHostAsync(At(ring_[slot].grads, at - lo),
                                   At(model_->GradPiece(u), at - layout.units()[u].shard_offset),
                                   n * sizeof(float));
  });
  TRAINER_RETURN_IF_ERROR(status);
  return be->RecordCopies(slot);
}

Status AdamW::UpdateChunk(size_t chunk, const AdamWParams& params) {
  const RingSlot& r = ring_[chunk % ring_.size()];
  TRAINER_RETURN_IF_ERROR(model_->backend()->WaitForCopies(static_cast<int>(chunk % ring_.size())));
  const size_t lo = chunk * chunk_, hi = std::min(shard_size_, lo + chunk_);
  AdamWParams p = params;
  for (const Segment& s : segments_) {
    const size_t a = std::max(lo, s.to), b = std::min(hi, s.to + s.n);
    if (a >= b) continue;
    p.weight_decay = s.decayed ? static_cast<float>(config_.weight_decay) : 0.f;
    const int64_t in_chunk = static_cast<int64_t>(a - lo), at = static_cast<int64_t>(a),
                  count = static_cast<int64_t>(b - a);
    TRAINER_RETURN_IF_ERROR(host_->AdamW(r.params.rows(in_chunk, count), master_.rows(at, count),
                                         r.grads.rows(in_chunk, count), m_.rows(at, count),
                                         v_.rows(at, count), p));
  }
  if (r.compute.empty()) return Status::Ok();
  const int64_t count = static_cast<int64_t>(hi - lo);
  return host_->Convert(r.compute.rows(0, count), r.params.rows(0, count));
}

Status AdamW::QueueChunkWeights(size_t chunk) {
  Backend* be = model_->backend();
  const RingSlot& r = ring_[chunk % ring_.size()];
  const Tensor& weights = r.compute.empty() ? r.params : r.compute;
  const size_t lo = chunk * chunk_;
  const ShardLayout& layout = model_->shard_layout();
  Status status;
  ForEachPieceInChunk(chunk, [&](int u, size_t at, size_t n) {
    if (!status.ok()) return;
    const Tensor piece = model_->ParamPiece(u);
    status = be->CopyToDeviceAsync(At(piece, at - layout.units()[u].shard_offset),
                                   At(weights, at - lo), n * DTypeSize(piece.dtype));
  });
  return status;
}

Status AdamW::OffloadedStep(const AdamWParams& params) {
  TRAINER_ASSERT(params.grad_sum_squares == nullptr,
                 "offloaded AdamW takes its clipping scale from the host");
  const size_t chunks = (shard_size_ + chunk_ - 1) / chunk_, slots = ring_.size();
  for (size_t i = 0; i < std::min(chunks, slots); ++i)
    TRAINER_RETURN_IF_ERROR(QueueChunkGradients(i));
  for (size_t i = 0; i < chunks; ++i) {
    TRAINER_RETURN_IF_ERROR(UpdateChunk(i, params));
    TRAINER_RETURN_IF_ERROR(QueueChunkWeights(i));
    if (i + slots < chunks) TRAINER_RETURN_IF_ERROR(QueueChunkGradients(i + slots));
  }
  return GatherWholeUnits();
}

}  // namespace trainer
