// The parameter registry (parameters.h): names, shapes and TP shards of the GPT's parameters, the
// layer partition over pipeline stages, and GPT-2 initialisation of full tensors.
#include "model/parameters.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/lora.h"

namespace trainer {

std::vector<int> StageLayerCounts(int num_layers, int pp_size, const std::vector<int>& pp_layers) {
  if (!pp_layers.empty()) return pp_layers;
  std::vector<int> counts(pp_size, num_layers / pp_size);
  for (int s = 0; s < num_layers % pp_size; ++s) counts[s] += 1;
  return counts;
}

ModelPartition MakePartition(const ModelConfig& model, const DistributedConfig& dist, int tp_rank,
                             int pp_rank, int ep_rank, int ep_size) {
  ModelPartition part;
  part.tp_rank = tp_rank;
  part.tp_size = dist.tp_degree;
  part.ep_rank = ep_rank;
  part.ep_size = ep_size;
  part.pp_rank = pp_rank;
  part.pp_size = dist.pp_degree;
  std::vector<int> counts = StageLayerCounts(model.num_layers, dist.pp_degree, dist.pp_layers);
  for (int s = 0; s < pp_rank; ++s) part.first_layer += counts[s];
  part.num_layers = counts[pp_rank];
  part.zero_stage = dist.zero_stage();
  part.flat_shards = part.zero_stage > 0 ? dist.sharding.sharding_degree : 1;
  return part;
}

namespace {

std::vector<int64_t> LocalShape(const std::vector<int64_t>& full, ShardKind kind, int tp, int ep) {
  std::vector<int64_t> local = full;
  if (kind == ShardKind::kSplitRows || kind == ShardKind::kSplitQkvRows) local[0] /= tp;
  if (kind == ShardKind::kSplitCols) local[1] /= tp;
  if (kind == ShardKind::kSplitExperts) local[0] /= ep;
  return local;
}

}  // namespace

namespace {

// The registry entries of `specs` on this rank, in buffer order with offsets.
std::vector<ParameterInfo> ToParameterList(std::vector<ParameterSpec> specs,
                                           const ModelPartition& part) {
  const int tp = part.tp_size;
  std::vector<ParameterInfo> list;
  for (ParameterSpec& ps : specs) {
    ParameterInfo p;
    p.name = std::move(ps.name);
    p.role = ps.role;
    p.lora_base = ps.lora_base;
    p.layer = ps.layer;
    p.full_shape = ps.full_shape;
    p.local_shape = LocalShape(ps.full_shape, ps.shard, tp, part.ep_size);
    p.shard = ps.shard;
    p.weight_decay = ps.weight_decay;
    p.contiguous_with_next = ps.contiguous_with_next;
    const bool tp_replicated =
        ps.shard == ShardKind::kReplicated || ps.shard == ShardKind::kSplitExperts;
    p.canonical = !tp_replicated || part.tp_rank == 0;
    p.grad_sum_over_tp = ps.grad_sum_over_tp;
    // The last stage's copy of the tied embedding (the LM head) when it is not the first stage.
    if (p.role == ParamRole::kTokenEmbedding && !part.first_stage()) {
      p.tied_copy = true;
      p.canonical = false;
    }
    list.push_back(std::move(p));
  }
  // Buffer order: decayed tensors first (one AdamW span), then the rest; stable within each.
  // From ZeRO stage 2 on, that order within each unit: outside the blocks first, then each block.
  const bool units = part.zero_stage >= 2;
  std::vector<int> unit_layers = {-1};
  for (int l = 0; units && l < part.num_layers; ++l) unit_layers.push_back(part.first_layer + l);
  const size_t unit_align = 64 * static_cast<size_t>(std::max(1, part.flat_shards));
  std::vector<ParameterInfo> ordered;
  size_t offset = 0;
  for (int unit : unit_layers) {
    for (int pass = 0; pass < 2; ++pass) {
      for (const ParameterInfo& p : list) {
        if (p.weight_decay != (pass == 0) || (units && p.layer != unit)) continue;
        ordered.push_back(p);
        ordered.back().offset = offset;
        // Keep every tensor 64-element aligned (256 bytes in f32) for vectorised kernels, except
        // within a run of contiguous ones (they form one matrix).
        offset += p.contiguous_with_next ? static_cast<size_t>(p.local_numel())
                                         : (static_cast<size_t>(p.local_numel()) + 63) / 64 * 64;
      }
    }
    if (units) offset = (offset + unit_align - 1) / unit_align * unit_align;
  }
  return ordered;
}

}  // namespace

std::vector<ParameterInfo> BuildParameterList(const ModelConfig& model,
                                              const ModelPartition& part) {
  if (model.lora())
    return ToParameterList(
        LoraSpecParameters(MakeModelSpec(model), part.tp_size, part.first_layer, part.num_layers),
        part);
  return BuildBaseParameterList(model, part);
}

std::vector<ParameterInfo> BuildBaseParameterList(const ModelConfig& model,
                                                  const ModelPartition& part) {
  return ToParameterList(
      SpecParameters(MakeModelSpec(model), model.sequence_parallel, part.tp_size,
                     part.first_stage(), part.last_stage(), part.first_layer, part.num_layers),
      part);
}

std::vector<ParameterInfo> BuildFrozenParameterList(const ModelConfig& model,
                                                    const ModelPartition& part) {
  if (!model.lora()) return {};
  return BuildBaseParameterList(model, part);
}

std::vector<ParameterInfo> FullParameterList(const ModelConfig& model) {
  ModelPartition whole;
  whole.num_layers = model.num_layers;
  return BuildParameterList(model, whole);
}

std::vector<ParameterInfo> FullBaseParameterList(const ModelConfig& model) {
  ModelPartition whole;
  whole.num_layers = model.num_layers;
  return BuildBaseParameterList(model, whole);
}

size_t TotalLocalElements(const std::vector<ParameterInfo>& params) {
  if (params.empty()) return 0;
  const ParameterInfo& last = params.back();
  return last.offset + (static_cast<size_t>(last.local_numel()) + 63) / 64 * 64;
}

size_t FlatBufferElements(const std::vector<ParameterInfo>& params, int shards) {
  const size_t piece = 64 * static_cast<size_t>(shards);
  return (TotalLocalElements(params) + piece - 1) / piece * piece;
}

size_t FirstNoDecayElement(const std::vector<ParameterInfo>& params) {
  for (const ParameterInfo& p : params)
    if (!p.weight_decay) return p.offset;
  return TotalLocalElements(params);
}

namespace {

// Calls fn(full_offset, local_offset, count) for each contiguous run of the shard.
template <typename Fn>
void ForEachShardRun(const ParameterInfo& p, int tp_rank, int tp_size, Fn fn) {
  const int64_t rows = p.full_shape[0];
  const int64_t row_len = p.full_numel() / rows;
  switch (p.shard) {
    case ShardKind::kReplicated:
      fn(0, 0, p.full_numel());
      break;
    case ShardKind::kSplitRows:
    case ShardKind::kSplitExperts: {
      const int64_t local_rows = rows / tp_size;
      fn(tp_rank * local_rows * row_len, 0, local_rows * row_len);
      break;
    }
    case ShardKind::kSplitQkvRows: {
      const int64_t third = rows / 3, local = third / tp_size;
      for (int part = 0; part < 3; ++part)
        fn((part * third + tp_rank * local) * row_len, part * local * row_len, local * row_len);
      break;
    }
    case ShardKind::kSplitCols: {
      const int64_t local_cols = row_len / tp_size;
      for (int64_t r = 0; r < rows; ++r)
        fn(r * row_len + tp_rank * local_cols, r * local_cols, local_cols);
      break;
    }
  }
}

}  // namespace

ShardSlot ShardSlotOf(const ParameterInfo& p, const ModelPartition& part) {
  if (p.shard == ShardKind::kSplitExperts) return {part.ep_rank, part.ep_size};
  return {part.tp_rank, part.tp_size};
}

void ExtractShard(const ParameterInfo& p, int tp_rank, int tp_size, const float* full,
                  float* local) {
  ForEachShardRun(p, tp_rank, tp_size, [&](int64_t f, int64_t l, int64_t n) {
    std::memcpy(local + l, full + f, static_cast<size_t>(n) * sizeof(float));
  });
}

void InsertShard(const ParameterInfo& p, int tp_rank, int tp_size, const float* local,
                 float* full) {
  ForEachShardRun(p, tp_rank, tp_size, [&](int64_t f, int64_t l, int64_t n) {
    std::memcpy(full + f, local + l, static_cast<size_t>(n) * sizeof(float));
  });
}

namespace {

constexpr uint64_t kSplitMix64Step = 0x9e3779b97f4a7c15ull;  // the state's step per draw

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += kSplitMix64Step);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// PEFT's init: A kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)) (torch's
// nn.Linear default), B zero; a splitmix64 stream seeded by (seed, name) like the others.
void InitLoraTensor(uint64_t seed, const ParameterInfo& p, float* out) {
  const int64_t n = p.full_numel();
  if (p.role == ParamRole::kLoraB) {
    for (int64_t i = 0; i < n; ++i) out[i] = 0.f;
    return;
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(p.full_shape[1]));
  uint64_t state = seed ^ HashName(p.name);
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(SplitMix64(&state) >> 11) * 0x1.0p-53;  // [0, 1)
    out[i] = static_cast<float>((2.0 * u - 1.0) * bound);
  }
}

}  // namespace

void InitFullTensor(const ModelConfig& model, uint64_t seed, const ParameterInfo& p, float* out) {
  const int64_t n = p.full_numel();
  if (p.role == ParamRole::kLoraA || p.role == ParamRole::kLoraB) {
    InitLoraTensor(seed, p, out);
    return;
  }
  const bool is_bias = p.full_shape.size() == 1 && !IsNormWeight(p.role);
  if (is_bias || IsNormWeight(p.role)) {
    const float value = is_bias ? 0.f : 1.f;
    for (int64_t i = 0; i < n; ++i) out[i] = value;
    return;
  }
  float std_dev = 0.02f;
  if (IsResidualProjection(p.role))
    std_dev = 0.02f / std::sqrt(2.f * static_cast<float>(model.num_layers));
  // Box-Muller over a splitmix64 stream seeded by (seed, name): the same on every platform and
  // for any number of threads, since pair j starts from the stream's state after 2j draws (an
  // 8B model's weights take minutes on one core).
  const uint64_t start = seed ^ HashName(p.name);
  const double two_pi = 6.283185307179586476925286766559;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += 2) {
    uint64_t state = start + static_cast<uint64_t>(i) * kSplitMix64Step;
    double u1 = (static_cast<double>(SplitMix64(&state) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = static_cast<double>(SplitMix64(&state) >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(std_dev * r * std::cos(two_pi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(std_dev * r * std::sin(two_pi * u2));
  }
}

std::vector<float> InitialParameterValues(const ModelConfig& model, const ModelPartition& part,
                                          const std::vector<ParameterInfo>& params, uint64_t seed) {
  std::vector<float> flat(TotalLocalElements(params), 0.f);
  std::vector<float> full;
  for (const ParameterInfo& p : params) {
    full.resize(static_cast<size_t>(p.full_numel()));
    InitFullTensor(model, seed, p, full.data());
    const ShardSlot slot = ShardSlotOf(p, part);
    ExtractShard(p, slot.rank, slot.size, full.data(), flat.data() + p.offset);
  }
  return flat;
}

}  // namespace trainer
