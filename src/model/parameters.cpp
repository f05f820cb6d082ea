// The parameter registry (parameters.h): names, shapes and TP shards of the GPT's parameters, the
// layer partition over pipeline stages, and GPT-2 initialisation of full tensors.
#include "model/parameters.h"

#include <cmath>
#include <cstring>

namespace trainer {

std::vector<int> StageLayerCounts(int num_layers, int pp_size, const std::vector<int>& pp_layers) {
  if (!pp_layers.empty()) return pp_layers;
  std::vector<int> counts(pp_size, num_layers / pp_size);
  for (int s = 0; s < num_layers % pp_size; ++s) counts[s] += 1;
  return counts;
}

ModelPartition MakePartition(const ModelConfig& model, const DistributedConfig& dist, int tp_rank,
                             int pp_rank) {
  ModelPartition part;
  part.tp_rank = tp_rank;
  part.tp_size = dist.tp_degree;
  part.pp_rank = pp_rank;
  part.pp_size = dist.pp_degree;
  std::vector<int> counts = StageLayerCounts(model.num_layers, dist.pp_degree, dist.pp_layers);
  for (int s = 0; s < pp_rank; ++s) part.first_layer += counts[s];
  part.num_layers = counts[pp_rank];
  part.flat_shards = dist.zero_stage1 ? dist.dp_degree : 1;
  return part;
}

namespace {

std::vector<int64_t> LocalShape(const std::vector<int64_t>& full, ShardKind kind, int tp) {
  std::vector<int64_t> local = full;
  if (kind == ShardKind::kSplitRows || kind == ShardKind::kSplitQkvRows) local[0] /= tp;
  if (kind == ShardKind::kSplitCols) local[1] /= tp;
  return local;
}

}  // namespace

std::vector<ParameterInfo> BuildParameterList(const ModelConfig& model,
                                              const ModelPartition& part) {
  const int64_t C = model.hidden_size, F = model.ffn_size(), V = model.padded_vocab();
  const int tp = part.tp_size;
  std::vector<ParameterInfo> list;
  auto add = [&](std::string name, std::vector<int64_t> full, ShardKind kind, bool decay) {
    ParameterInfo p;
    p.name = std::move(name);
    p.full_shape = full;
    p.local_shape = LocalShape(full, kind, tp);
    p.shard = kind;
    p.weight_decay = decay;
    p.canonical = kind != ShardKind::kReplicated || part.tp_rank == 0;
    p.grad_sum_over_tp =
        model.sequence_parallel && tp > 1 && p.name.find(".ln_") != std::string::npos;
    list.push_back(std::move(p));
  };
  const bool tied_copy = part.last_stage() && !part.first_stage();
  if (part.first_stage() || tied_copy) {
    add("transformer.wte.weight", {V, C}, ShardKind::kSplitRows, true);
    if (tied_copy) {
      list.back().tied_copy = true;
      list.back().canonical = false;
    }
  }
  if (part.first_stage())
    add("transformer.wpe.weight", {model.max_seq_len, C}, ShardKind::kReplicated, true);
  for (int l = part.first_layer; l < part.first_layer + part.num_layers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, ShardKind::kReplicated, false);
    add(h + "ln_1.bias", {C}, ShardKind::kReplicated, false);
    add(h + "attn.c_attn.weight", {3 * C, C}, ShardKind::kSplitQkvRows, true);
    add(h + "attn.c_attn.bias", {3 * C}, ShardKind::kSplitQkvRows, false);
    add(h + "attn.c_proj.weight", {C, C}, ShardKind::kSplitCols, true);
    add(h + "attn.c_proj.bias", {C}, ShardKind::kReplicated, false);
    add(h + "ln_2.weight", {C}, ShardKind::kReplicated, false);
    add(h + "ln_2.bias", {C}, ShardKind::kReplicated, false);
    add(h + "mlp.c_fc.weight", {F, C}, ShardKind::kSplitRows, true);
    add(h + "mlp.c_fc.bias", {F}, ShardKind::kSplitRows, false);
    add(h + "mlp.c_proj.weight", {C, F}, ShardKind::kSplitCols, true);
    add(h + "mlp.c_proj.bias", {C}, ShardKind::kReplicated, false);
  }
  if (part.last_stage()) {
    add("transformer.ln_f.weight", {C}, ShardKind::kReplicated, false);
    add("transformer.ln_f.bias", {C}, ShardKind::kReplicated, false);
  }
  // Buffer order: decayed tensors first (one AdamW span), then the rest; stable within each.
  std::vector<ParameterInfo> ordered;
  for (int pass = 0; pass < 2; ++pass)
    for (const ParameterInfo& p : list)
      if (p.weight_decay == (pass == 0)) ordered.push_back(p);
  size_t offset = 0;
  for (ParameterInfo& p : ordered) {
    p.offset = offset;
    // Keep every tensor 64-element aligned (256 bytes in f32) for vectorised kernels.
    offset += (static_cast<size_t>(p.local_numel()) + 63) / 64 * 64;
  }
  return ordered;
}

std::vector<ParameterInfo> FullParameterList(const ModelConfig& model) {
  ModelPartition whole;
  whole.num_layers = model.num_layers;
  return BuildParameterList(model, whole);
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
    case ShardKind::kSplitRows: {
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

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void InitFullTensor(const ModelConfig& model, uint64_t seed, const std::string& name,
                    const std::vector<int64_t>& full_shape, float* out) {
  int64_t n = 1;
  for (int64_t s : full_shape) n *= s;
  const bool is_bias = EndsWith(name, ".bias");
  const bool is_layernorm = name.find(".ln_") != std::string::npos;
  if (is_bias || is_layernorm) {
    const float value = (is_layernorm && !is_bias) ? 1.f : 0.f;
    for (int64_t i = 0; i < n; ++i) out[i] = value;
    return;
  }
  float std_dev = 0.02f;
  if (EndsWith(name, "attn.c_proj.weight") || EndsWith(name, "mlp.c_proj.weight"))
    std_dev = 0.02f / std::sqrt(2.f * static_cast<float>(model.num_layers));
  // Box-Muller over a splitmix64 stream seeded by (seed, name): the same on every platform.
  uint64_t state = seed ^ HashName(name);
  const double two_pi = 6.283185307179586476925286766559;
  for (int64_t i = 0; i < n; i += 2) {
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
    InitFullTensor(model, seed, p.name, p.full_shape, full.data());
    ExtractShard(p, part.tp_rank, part.tp_size, full.data(), flat.data() + p.offset);
  }
  return flat;
}

}  // namespace trainer
