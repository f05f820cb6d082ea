// AdamW (adamw.h).
#include "optimizer/adamw.h"

#include <algorithm>

#include "common/check.h"

namespace trainer {
namespace {

// [lo, hi) of `span` inside [begin, end); empty (lo == hi) when they do not meet.
std::pair<size_t, size_t> Intersect(std::pair<size_t, size_t> span, size_t begin, size_t end) {
  const size_t lo = std::max(span.first, begin), hi = std::min(span.second, end);
  return {lo, std::max(lo, hi)};
}

char* ElementAddress(const Tensor& t, size_t index) {
  return static_cast<char*>(t.data) + index * DTypeSize(t.dtype);
}

}  // namespace

size_t AdamW::BufferBytes(const std::vector<ParameterInfo>& params, int shards) {
  const size_t piece = FlatBufferElements(params, shards) / static_cast<size_t>(shards);
  return 3 * Backend::AllocationSize(piece * sizeof(float)) +
         Backend::AllocationSize(sizeof(double));
}

AdamW::~AdamW() {
  for (void* p : allocations_) model_->backend()->Free(p);
}

Status AdamW::Create(GptModel* model, const OptimizerConfig& config, Communicator* shard_group,
                     std::unique_ptr<AdamW>* out) {
  std::unique_ptr<AdamW> o(new AdamW());
  o->model_ = model;
  o->config_ = config;
  const auto& params = model->parameters();
  o->total_ = TotalLocalElements(params);
  o->first_no_decay_ = FirstNoDecayElement(params);
  const int shards = model->partition().flat_shards;
  o->shard_size_ = FlatBufferElements(params, shards) / static_cast<size_t>(shards);
  if (shards > 1) {
    TRAINER_ASSERT(shard_group != nullptr && shard_group->size() == shards,
                   "ZeRO-1 needs the DP group the flat buffers are split over");
    o->shard_group_ = shard_group;
    o->shard_begin_ = static_cast<size_t>(shard_group->rank()) * o->shard_size_;
  }
  Backend* be = model->backend();
  for (Tensor* t : {&o->master_, &o->m_, &o->v_}) {
    void* p = nullptr;
    TRAINER_RETURN_IF_ERROR(be->Allocate(o->shard_size_ * sizeof(float), &p));
    o->allocations_.push_back(p);
    *t = Tensor(p, DType::kF32, {static_cast<int64_t>(o->shard_size_)});
  }
  void* norm = nullptr;
  TRAINER_RETURN_IF_ERROR(be->Allocate(sizeof(double), &norm));
  o->allocations_.push_back(norm);
  o->grad_norm_squared_ = Tensor(norm, DType::kF64, {1});
  // Merge neighbouring canonical parameters into spans (padding between them is zero).
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].canonical) continue;
    const size_t begin = params[i].offset;
    const size_t end = i + 1 < params.size() ? params[i + 1].offset : o->total_;
    if (!o->canonical_spans_.empty() && o->canonical_spans_.back().second == begin)
      o->canonical_spans_.back().second = end;
    else
      o->canonical_spans_.emplace_back(begin, end);
  }
  *out = std::move(o);
  return Status::Ok();
}

Status AdamW::SetMaster(const std::vector<float>& flat) {
  TRAINER_ASSERT(flat.size() == total_, "master size mismatch");
  TRAINER_RETURN_IF_ERROR(Upload(0, flat));
  return model_->SetParameters(flat);
}

Status AdamW::AddToParameters(size_t offset, const std::vector<float>& delta) {
  Backend* be = model_->backend();
  auto add = [&](Tensor t, size_t first, size_t n, const float* d) -> Status {
    std::vector<float> values(n);
    TRAINER_RETURN_IF_ERROR(be->CopyToHost(values.data(), ElementAddress(t, first), n * 4));
    for (size_t i = 0; i < n; ++i) values[i] += d[i];
    return be->CopyToDevice(ElementAddress(t, first), values.data(), n * 4);
  };
  TRAINER_ASSERT(model_->parameter_buffer().dtype == DType::kF32,
                 "AddToParameters needs f32 compute parameters (the CPU path)");
  const auto [lo, hi] = Intersect({offset, offset + delta.size()}, shard_begin(), shard_end());
  if (hi > lo)
    TRAINER_RETURN_IF_ERROR(add(master_, lo - shard_begin(), hi - lo, delta.data() + (lo - offset)));
  return add(model_->parameter_buffer(), offset, delta.size(), delta.data());
}

Status AdamW::Download(int which, std::vector<float>* flat) const {
  const Tensor& t = which == 0 ? master_ : which == 1 ? m_ : v_;
  Backend* be = model_->backend();
  flat->resize(total_);
  if (!sharded()) return be->CopyToHost(flat->data(), t.data, total_ * sizeof(float));
  // Every rank's piece into its place in the gradient buffer, gathered there, then copied out.
  const Tensor scratch = model_->gradient_buffer();
  char* mine = ElementAddress(scratch, shard_begin());
  TRAINER_RETURN_IF_ERROR(be->CopyDeviceToDevice(mine, t.data, shard_size_ * sizeof(float)));
  TRAINER_RETURN_IF_ERROR(shard_group_->AllGather(mine, scratch.data, shard_size_, DType::kF32));
  return be->CopyToHost(flat->data(), scratch.data, total_ * sizeof(float));
}

Status AdamW::Upload(int which, const std::vector<float>& flat) {
  const Tensor& t = which == 0 ? master_ : which == 1 ? m_ : v_;
  TRAINER_ASSERT(flat.size() == total_, "optimizer state size mismatch");
  // This rank's piece of `flat`; past the last parameter (padding of the last piece) it is zero.
  const auto [lo, hi] = Intersect({0, total_}, shard_begin(), shard_end());
  Backend* be = model_->backend();
  if (hi > lo)
    TRAINER_RETURN_IF_ERROR(be->CopyToDevice(t.data, flat.data() + lo, (hi - lo) * sizeof(float)));
  const size_t copied = hi - lo;
  if (copied == shard_size_) return Status::Ok();
  return be->Zero(t.rows(static_cast<int64_t>(copied), static_cast<int64_t>(shard_size_ - copied)));
}

Status AdamW::ReduceScatterGradients() {
  TRAINER_ASSERT(sharded(), "ReduceScatterGradients without ZeRO-1");
  const Tensor grads = model_->gradient_buffer();
  return shard_group_->ReduceScatter(grads.data, ElementAddress(grads, shard_begin()), shard_size_,
                                     DType::kF32);
}

Status AdamW::QueueLocalGradNormSquared() {
  Backend* be = model_->backend();
  const Tensor grads = model_->gradient_buffer();
  bool first = true;  // the first span sets the sum, the others add to it
  for (const auto& whole : canonical_spans_) {
    const auto [begin, end] = Intersect(whole, shard_begin(), shard_end());
    if (end == begin) continue;
    TRAINER_RETURN_IF_ERROR(
        be->SumInto(grad_norm_squared_,
                    grads.rows(static_cast<int64_t>(begin), static_cast<int64_t>(end - begin)),
                    SumOf::kSquares, !first));
    first = false;
  }
  return first ? be->SumInto(grad_norm_squared_, Tensor(), SumOf::kSquares, false) : Status::Ok();
}

Status AdamW::QueuedGradNormSquared(double* out) const {
  return model_->backend()->CopyToHost(out, grad_norm_squared_.data, sizeof(double));
}

Status AdamW::StepClippedOnDevice(int step, double lr, double max_norm) {
  AdamWParams p;
  p.step = step;
  p.lr = static_cast<float>(lr);
  p.grad_sum_squares = grad_norm_squared_.as<double>();
  p.max_grad_norm = max_norm;
  return StepWith(p);
}

Status AdamW::Step(int step, double lr, float grad_scale) {
  AdamWParams p;
  p.step = step;
  p.lr = static_cast<float>(lr);
  p.grad_scale = grad_scale;
  return StepWith(p);
}

Status AdamW::StepWith(AdamWParams p) {
  p.beta1 = static_cast<float>(config_.beta1);
  p.beta2 = static_cast<float>(config_.beta2);
  p.eps = static_cast<float>(config_.eps);
  const Tensor params = model_->parameter_buffer(), grads = model_->gradient_buffer();
  const size_t flat_end = static_cast<size_t>(params.numel());
  const std::pair<size_t, size_t> spans[2] = {{0, first_no_decay_}, {first_no_decay_, flat_end}};
  for (int i = 0; i < 2; ++i) {
    const auto [begin, end] = Intersect(spans[i], shard_begin(), shard_end());
    if (end == begin) continue;
    const int64_t at = static_cast<int64_t>(begin), n = static_cast<int64_t>(end - begin);
    const int64_t local = static_cast<int64_t>(begin - shard_begin());
    p.weight_decay = i == 0 ? static_cast<float>(config_.weight_decay) : 0.f;
    TRAINER_RETURN_IF_ERROR(model_->backend()->AdamW(params.rows(at, n), master_.rows(local, n),
                                                     grads.rows(at, n), m_.rows(local, n),
                                                     v_.rows(local, n), p));
  }
  if (!sharded()) return Status::Ok();
  return shard_group_->AllGather(ElementAddress(params, shard_begin()), params.data, shard_size_,
                                 params.dtype);
}

}  // namespace trainer
