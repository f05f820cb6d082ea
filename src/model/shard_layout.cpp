// ShardLayout (shard_layout.h).
#include "model/shard_layout.h"

#include <algorithm>

namespace trainer {

ShardLayout::ShardLayout(const std::vector<ParameterInfo>& params, const ModelPartition& part)
    : stage_(part.zero_stage), shards_(std::max(1, part.flat_shards)), rank_(part.shard_rank) {
  flat_ = FlatBufferElements(params, shards_);
  if (stage_ < 2) {
    units_.push_back({0, flat_, -1, 0});
    return;
  }
  // Tail first (BuildParameterList's order), then one unit per block, each starting where its
  // first tensor does.
  units_.push_back({0, 0, -1, 0});
  for (int l = 0; l < part.num_layers; ++l) units_.push_back({0, 0, part.first_layer + l, 0});
  std::vector<bool> seen(units_.size(), false);
  for (const ParameterInfo& p : params) {
    const int u = p.layer < 0 ? 0 : p.layer - part.first_layer + 1;
    if (!seen[u]) units_[u].begin = p.offset;
    seen[u] = true;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    const size_t end = u + 1 < units_.size() ? units_[u + 1].begin : flat_;
    units_[u].size = end - units_[u].begin;
    if (u > 0) units_[u].shard_offset = units_[u - 1].shard_offset + units_[u - 1].size / shards_;
  }
}

size_t ShardLayout::largest_block() const {
  size_t largest = 0;
  for (size_t u = 1; u < units_.size(); ++u) largest = std::max(largest, units_[u].size);
  return largest;
}

int ShardLayout::UnitOf(size_t index) const {
  for (int u = static_cast<int>(units_.size()) - 1; u > 0; --u)
    if (index >= units_[u].begin) return u;
  return 0;
}

}  // namespace trainer
