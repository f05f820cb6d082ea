// AdamW (adamw.h).
#include "optimizer/adamw.h"

#include <algorithm>

#include "common/check.h"
#include "common/master_remainder.h"

namespace trainer {
namespace {

char* ElementAddress(const Tensor& t, size_t index) {
  return static_cast<char*>(t.data) + index * DTypeSize(t.dtype);
}

}  // namespace

size_t AdamW::BufferBytes(const std::vector<ParameterInfo>& params, int shards, bool offload,
                          bool halves) {
  const size_t piece = FlatBufferElements(params, shards) / static_cast<size_t>(shards);
  const size_t state = offload ? 0
                               : Backend::AllocationSize(piece * (halves ? 2 : 4)) +
                                     2 * Backend::AllocationSize(piece * sizeof(float));
  return state + Backend::AllocationSize(sizeof(double));
}

bool AdamW::KeepsMasterHalves(const OptimizerConfig& config, DType compute_dtype, int shards,
                              bool offload) {
  return config.store_param_remainders && compute_dtype == DType::kBF16 && shards == 1 && !offload;
}

AdamW::~AdamW() {
  for (void* p : allocations_) model_->backend()->Free(p);
  for (void* p : ring_allocations_) ring_backend_->FreeHost(p);
  for (void* p : host_allocations_) host_->Free(p);
}

Status AdamW::Create(GptModel* model, const OptimizerConfig& config, Communicator* shard_group,
                     std::unique_ptr<AdamW>* out, bool offload, size_t offload_chunk) {
  std::unique_ptr<AdamW> o(new AdamW());
  o->model_ = model;
  o->config_ = config;
  if (offload) o->host_ = MakeCpuBackend();
  const auto& params = model->parameters();
  o->total_ = TotalLocalElements(params);
  const int shards = model->partition().flat_shards;
  o->shard_size_ = model->shard_layout().shard_elements();
  if (shards > 1) {
    TRAINER_ASSERT(shard_group != nullptr && shard_group->size() == shards &&
                       shard_group->rank() == model->shard_layout().rank(),
                   "sharding needs the group the flat buffers are split over");
    o->shard_group_ = shard_group;
  }
  Backend* be = model->backend();
  Backend* state = o->state_backend();
  const bool halves = KeepsMasterHalves(config, model->parameter_buffer().dtype, shards, offload);
  for (Tensor* t : {&o->master_, &o->m_, &o->v_}) {
    const DType dtype = halves && t == &o->master_ ? DType::kU16 : DType::kF32;
    void* p = nullptr;
    TRAINER_RETURN_IF_ERROR(state->Allocate(o->shard_size_ * DTypeSize(dtype), &p));
    (o->host_ ? o->host_allocations_ : o->allocations_).push_back(p);
    *t = Tensor(p, dtype, {static_cast<int64_t>(o->shard_size_)});
  }
  void* norm = nullptr;
  TRAINER_RETURN_IF_ERROR(be->Allocate(sizeof(double), &norm));
  o->allocations_.push_back(norm);
  o->grad_norm_squared_ = Tensor(norm, DType::kF64, {1});
  // Merge neighbouring parameters into spans (padding between them is zero): canonical ones for
  // the norm, and runs of equal weight decay for the update.
  const size_t flat = model->shard_layout().flat_elements();
  for (size_t i = 0; i < params.size(); ++i) {
    const size_t begin = params[i].offset;
    const size_t end = i + 1 < params.size() ? params[i + 1].offset : flat;
    auto& decay = o->decay_spans_;
    if (!decay.empty() && decay.back().second == params[i].weight_decay)
      decay.back().first.second = end;
    else
      decay.push_back({{begin, end}, params[i].weight_decay});
    if (!params[i].canonical) continue;
    const size_t canonical_end = i + 1 < params.size() ? end : o->total_;
    const bool expert = params[i].shard == ShardKind::kSplitExperts;
    for (auto* spans : {&o->canonical_spans_, expert ? &o->expert_spans_ : &o->dense_spans_}) {
      if (!spans->empty() && spans->back().second == begin)
        spans->back().second = canonical_end;
      else
        spans->emplace_back(begin, canonical_end);
    }
  }
  if (o->host_) TRAINER_RETURN_IF_ERROR(o->SetUpOffload(offload_chunk));
  *out = std::move(o);
  return Status::Ok();
}

Status AdamW::SetMaster(const std::vector<float>& flat) {
  TRAINER_ASSERT(flat.size() == total_, "master size mismatch");
  TRAINER_RETURN_IF_ERROR(Upload(0, flat));
  return master_halves() ? Status::Ok() : model_->SetParameters(flat);
}

Status AdamW::AddToParameters(size_t offset, const std::vector<float>& delta) {
  // The master rows += delta; the compute parameters then take the new master values (rounded to
  // bf16 on the GPU, so that the copy never drifts from the master).
  auto add = [](Backend* be, Tensor t, const float* d, std::vector<float>* values) -> Status {
    values->resize(static_cast<size_t>(t.numel()));
    TRAINER_RETURN_IF_ERROR(be->CopyToHost(values->data(), t.data, values->size() * 4));
    for (size_t i = 0; i < values->size(); ++i) (*values)[i] += d[i];
    return be->CopyToDevice(t.data, values->data(), values->size() * 4);
  };
  auto set = [](Backend* be, Tensor t, const std::vector<float>& values) -> Status {
    if (t.dtype == DType::kF32) return be->CopyToDevice(t.data, values.data(), values.size() * 4);
    std::vector<uint16_t> rounded(values.size());
    for (size_t i = 0; i < values.size(); ++i) rounded[i] = FloatToBF16(values[i]);
    return be->CopyToDevice(t.data, rounded.data(), rounded.size() * 2);
  };
  // The master kept as halves: both halves read, added to and split again.
  auto add_halves = [](Backend* be, Tensor param, Tensor remainder, const float* d) -> Status {
    const size_t n = static_cast<size_t>(param.numel());
    std::vector<uint16_t> high(n), low(n);
    TRAINER_RETURN_IF_ERROR(be->CopyToHost(high.data(), param.data, n * 2));
    TRAINER_RETURN_IF_ERROR(be->CopyToHost(low.data(), remainder.data, n * 2));
    for (size_t i = 0; i < n; ++i) {
      const float w = JoinMaster(high[i], low[i]) + d[i];
      high[i] = MasterHigh(w);
      low[i] = MasterRemainder(w);
    }
    TRAINER_RETURN_IF_ERROR(be->CopyToDevice(param.data, high.data(), n * 2));
    return be->CopyToDevice(remainder.data, low.data(), n * 2);
  };
  const DType pd = model_->parameter_buffer().dtype;
  TRAINER_ASSERT(pd == DType::kF32 || pd == DType::kBF16,
                 "AddToParameters needs f32 or bf16 compute parameters");
  // This rank's pieces of [offset, offset + n): the master copy and the compute parameters; the
  // units kept whole then gather them, as after a step.
  const ShardLayout& layout = model_->shard_layout();
  Status status;
  layout.ForEachOwned(offset, offset + delta.size(), [&](int u, size_t at, size_t to, size_t n) {
    if (!status.ok()) return;
    const int64_t local = static_cast<int64_t>(at - layout.piece_begin(u)),
                  count = static_cast<int64_t>(n);
    const float* d = delta.data() + (at - offset);
    if (master_halves()) {
      status = add_halves(model_->backend(), model_->ParamPiece(u).rows(local, count),
                          master_.rows(static_cast<int64_t>(to), count), d);
      return;
    }
    std::vector<float> values;
    status = add(state_backend(), master_.rows(static_cast<int64_t>(to), count), d, &values);
    if (status.ok()) status = set(model_->backend(), model_->ParamPiece(u).rows(local, count), values);
  });
  TRAINER_RETURN_IF_ERROR(status);
  return GatherWholeUnits();
}

size_t AdamW::DownloadElements() const { return model_->shard_layout().flat_elements(); }

const float* AdamW::HostState(int which) const {
  if (!host_ || sharded()) return nullptr;
  return static_cast<const float*>((which == 0 ? master_ : which == 1 ? m_ : v_).data);
}

Status AdamW::Download(int which, std::vector<float>* flat) const {
  flat->resize(DownloadElements());
  TRAINER_RETURN_IF_ERROR(DownloadTo(which, flat->data()));
  flat->resize(total_);
  return Status::Ok();
}

Status AdamW::DownloadTo(int which, float* host) const {
  const Tensor& t = which == 0 ? master_ : which == 1 ? m_ : v_;
  Backend* be = model_->backend();
  const ShardLayout& layout = model_->shard_layout();
  auto join = [&](Tensor param, Tensor remainder, Tensor joined, size_t at) {
    TRAINER_RETURN_IF_ERROR(be->JoinMasterHalves(joined, param, remainder));
    return be->CopyToHost(host + at, joined.data, joined.bytes());
  };
  if (which == 0 && master_halves()) return ForEachMasterPiece(join);
  if (!sharded()) return state_backend()->CopyToHost(host, t.data, total_ * sizeof(float));
  // Unit by unit: every rank's piece into its place in a scratch buffer of the unit's size (free
  // between steps), gathered there (after the copy, on the group's stream where it has one),
  // then copied out.
  void* stream = BackendStream(be);
  for (int u = 0; u < static_cast<int>(layout.units().size()); ++u) {
    const ShardUnit& unit = layout.units()[u];
    const size_t piece = layout.piece(u);
    const Tensor scratch = model_->GradScratch(u);
    char* mine = ElementAddress(scratch, piece * static_cast<size_t>(layout.rank()));
    const char* from = ElementAddress(t, unit.shard_offset);
    TRAINER_RETURN_IF_ERROR(host_ ? be->CopyToDevice(mine, from, piece * sizeof(float))
                                  : be->CopyDeviceToDevice(mine, from, piece * sizeof(float)));
    TRAINER_RETURN_IF_ERROR(shard_group_->StartAfter(stream));
    TRAINER_RETURN_IF_ERROR(shard_group_->AllGather(mine, scratch.data, piece, DType::kF32));
    TRAINER_RETURN_IF_ERROR(shard_group_->FinishBefore(stream));
    TRAINER_RETURN_IF_ERROR(
        be->CopyToHost(host + unit.begin, scratch.data, unit.size * sizeof(float)));
  }
  return Status::Ok();
}

Status AdamW::Upload(int which, const std::vector<float>& flat) {
  const Tensor& t = which == 0 ? master_ : which == 1 ? m_ : v_;
  TRAINER_ASSERT(flat.size() == total_, "optimizer state size mismatch");
  // This rank's pieces of `flat`; past the last parameter (padding) they are zero.
  Backend* be = state_backend();
  TRAINER_RETURN_IF_ERROR(be->Zero(t));
  if (which == 0 && master_halves())
    return ForEachMasterPiece([&](Tensor param, Tensor remainder, Tensor f32, size_t at) {
      TRAINER_RETURN_IF_ERROR(be->CopyToDevice(f32.data, flat.data() + at, f32.bytes()));
      return be->SplitMasterHalves(param, remainder, f32);
    });
  Status status;
  model_->shard_layout().ForEachOwned(0, total_, [&](int, size_t at, size_t to, size_t n) {
    if (status.ok())
      status = be->CopyToDevice(ElementAddress(t, to), flat.data() + at, n * sizeof(float));
  });
  return status;
}

template <typename Fn>
Status AdamW::ForEachMasterPiece(Fn fn) const {
  TRAINER_ASSERT(master_halves() && !sharded(), "master halves are kept unsharded");
  const ShardLayout& layout = model_->shard_layout();
  Status status;
  layout.ForEachOwned(0, total_, [&](int u, size_t at, size_t to, size_t n) {
    if (!status.ok()) return;
    const int64_t local = static_cast<int64_t>(at - layout.piece_begin(u)),
                  count = static_cast<int64_t>(n);
    status =
        fn(model_->ParamPiece(u).rows(local, count), master_.rows(static_cast<int64_t>(to), count),
           model_->GradPiece(u).rows(local, count), at);
  });
  return status;
}

Status AdamW::ReduceScatterGradients(int u, const Tensor& grads) {
  TRAINER_ASSERT(sharded(), "ReduceScatterGradients without sharding");
  return shard_group_->ReduceScatter(grads.data, model_->GradPiece(u).data,
                                     model_->shard_layout().piece(u), DType::kF32);
}

Status AdamW::StartGradNormSquared(Tensor* sum) {
  *sum = grad_norm_squared_;
  return model_->backend()->Zero(grad_norm_squared_);
}

Status AdamW::QueueLocalGradNormSquared(bool experts_only, bool experts_added) {
  TRAINER_ASSERT(!(experts_only && experts_added), "the experts alone, added already");
  Backend* be = model_->backend();
  const ShardLayout& layout = model_->shard_layout();
  bool first = !experts_added;  // the first span sets the sum, the others add to it
  Status status;
  for (const auto& [lo, hi] : experts_only    ? expert_spans_
                              : experts_added ? dense_spans_
                                              : canonical_spans_) {
    layout.ForEachOwned(lo, hi, [&](int u, size_t at, size_t, size_t n) {
      if (!status.ok()) return;
      const Tensor piece = model_->GradPiece(u);
      status = be->SumInto(
          grad_norm_squared_,
          piece.rows(static_cast<int64_t>(at - layout.piece_begin(u)), static_cast<int64_t>(n)),
          SumOf::kSquares, !first);
      first = false;
    });
  }
  TRAINER_RETURN_IF_ERROR(status);
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
  if (host_) return OffloadedStep(p);
  Backend* be = model_->backend();
  const ShardLayout& layout = model_->shard_layout();
  Status status;
  for (const auto& [span, decayed] : decay_spans_) {
    p.weight_decay = decayed ? static_cast<float>(config_.weight_decay) : 0.f;
    layout.ForEachOwned(span.first, span.second, [&](int u, size_t at, size_t to, size_t n) {
      if (!status.ok()) return;
      const int64_t local = static_cast<int64_t>(at - layout.piece_begin(u)),
                    shard = static_cast<int64_t>(to), count = static_cast<int64_t>(n);
      status = be->AdamW(model_->ParamPiece(u).rows(local, count), master_.rows(shard, count),
                         model_->GradPiece(u).rows(local, count), m_.rows(shard, count),
                         v_.rows(shard, count), p);
    });
  }
  TRAINER_RETURN_IF_ERROR(status);
  return GatherWholeUnits();
}

Status AdamW::GatherWholeUnits() {
  if (!sharded()) return Status::Ok();
  // Every unit kept whole gathers its pieces (in place: the piece is the unit's rows).
  const ShardLayout& layout = model_->shard_layout();
  void* stream = BackendStream(model_->backend());
  TRAINER_RETURN_IF_ERROR(shard_group_->StartAfter(stream));
  for (int u = 0; u < static_cast<int>(layout.units().size()); ++u) {
    const Tensor whole = model_->ParamWhole(u);
    if (whole.empty()) continue;
    TRAINER_RETURN_IF_ERROR(shard_group_->AllGather(model_->ParamPiece(u).data, whole.data,
                                                    layout.piece(u), whole.dtype));
  }
  return shard_group_->FinishBefore(stream);
}

}  // namespace trainer
