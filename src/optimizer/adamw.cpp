// AdamW (adamw.h).
#include "optimizer/adamw.h"

#include "common/check.h"

namespace trainer {

AdamW::~AdamW() {
  for (void* p : allocations_) model_->backend()->Free(p);
}

Status AdamW::Create(GptModel* model, const OptimizerConfig& config, std::unique_ptr<AdamW>* out) {
  std::unique_ptr<AdamW> o(new AdamW());
  o->model_ = model;
  o->config_ = config;
  o->total_ = TotalLocalElements(model->parameters());
  o->first_no_decay_ = FirstNoDecayElement(model->parameters());
  Backend* be = model->backend();
  for (Tensor* t : {&o->master_, &o->m_, &o->v_}) {
    void* p = nullptr;
    TRAINER_RETURN_IF_ERROR(be->Allocate(o->total_ * sizeof(float), &p));
    o->allocations_.push_back(p);
    *t = Tensor(p, DType::kF32, {static_cast<int64_t>(o->total_)});
  }
  // Merge neighbouring canonical parameters into spans (padding between them is zero).
  const auto& params = model->parameters();
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

Status AdamW::Download(int which, std::vector<float>* flat) const {
  const Tensor& t = which == 0 ? master_ : which == 1 ? m_ : v_;
  flat->resize(total_);
  return model_->backend()->CopyToHost(flat->data(), t.data, total_ * sizeof(float));
}

Status AdamW::Upload(int which, const std::vector<float>& flat) {
  const Tensor& t = which == 0 ? master_ : which == 1 ? m_ : v_;
  TRAINER_ASSERT(flat.size() == total_, "optimizer state size mismatch");
  return model_->backend()->CopyToDevice(t.data, flat.data(), total_ * sizeof(float));
}

Status AdamW::LocalGradNormSquared(double* out) const {
  double total = 0.0;
  const Tensor grads = model_->gradient_buffer();
  for (const auto& [begin, end] : canonical_spans_) {
    Tensor span = grads.rows(static_cast<int64_t>(begin), static_cast<int64_t>(end - begin));
    double part = 0.0;
    TRAINER_RETURN_IF_ERROR(model_->backend()->SumSquares(span, &part));
    total += part;
  }
  *out = total;
  return Status::Ok();
}

Status AdamW::Step(int step, double lr, float grad_scale) {
  AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(config_.beta1);
  p.beta2 = static_cast<float>(config_.beta2);
  p.eps = static_cast<float>(config_.eps);
  p.step = step;
  p.grad_scale = grad_scale;
  const Tensor params = model_->parameter_buffer(), grads = model_->gradient_buffer();
  const std::pair<size_t, size_t> spans[2] = {{0, first_no_decay_}, {first_no_decay_, total_}};
  for (int i = 0; i < 2; ++i) {
    const int64_t begin = static_cast<int64_t>(spans[i].first);
    const int64_t n = static_cast<int64_t>(spans[i].second - spans[i].first);
    if (n == 0) continue;
    p.weight_decay = i == 0 ? static_cast<float>(config_.weight_decay) : 0.f;
    TRAINER_RETURN_IF_ERROR(model_->backend()->AdamW(params.rows(begin, n), master_.rows(begin, n),
                                                     grads.rows(begin, n), m_.rows(begin, n),
                                                     v_.rows(begin, n), p));
  }
  return Status::Ok();
}

}  // namespace trainer
