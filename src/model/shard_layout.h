// ShardLayout: how the flat parameter/gradient/optimizer buffers of a rank split over its
// sharding group (Distributed.sharding). The buffers are cut into units: one unit (the whole
// buffer) up to ZeRO stage 1; from stage 2 on, the tensors outside the blocks, then one unit per
// block (the order BuildParameterList lays them out in). Each unit splits into `shards` equal
// pieces; rank r owns piece r of every unit, and its shard is those pieces back to back. Pure
// arithmetic (no backend), shared by the model, the optimizer and the memory plan.
#pragma once

#include <cstddef>
#include <vector>

#include "model/parameters.h"

namespace trainer {

struct ShardUnit {
  size_t begin = 0, size = 0;  // [begin, begin + size) of the flat buffer; size % (64*shards) == 0
  int layer = -1;              // the block's global index; -1 for the tensors outside the blocks
  size_t shard_offset = 0;     // where this unit's piece starts in a rank's shard
};

class ShardLayout {
 public:
  ShardLayout() = default;
  ShardLayout(const std::vector<ParameterInfo>& params, const ModelPartition& part);

  int stage() const { return stage_; }
  int shards() const { return shards_; }
  int rank() const { return rank_; }
  const std::vector<ShardUnit>& units() const { return units_; }
  size_t flat_elements() const { return flat_; }
  size_t shard_elements() const { return flat_ / static_cast<size_t>(shards_); }
  size_t piece(int u) const { return units_[u].size / static_cast<size_t>(shards_); }
  // Where this rank's piece of unit u starts in the flat buffer.
  size_t piece_begin(int u) const { return units_[u].begin + rank_ * piece(u); }
  // The unit of local block `local` (stage >= 2), and the largest block unit.
  int BlockUnit(int local) const { return local + 1; }
  size_t largest_block() const;
  // The unit holding flat element `index`.
  int UnitOf(size_t index) const;
  // Calls fn(unit, flat_index, shard_index, count) for each run of [lo, hi) this rank owns.
  template <class Fn>
  void ForEachOwned(size_t lo, size_t hi, Fn fn) const {
    for (int u = 0; u < static_cast<int>(units_.size()); ++u) {
      const size_t begin = piece_begin(u), end = begin + piece(u);
      const size_t a = lo > begin ? lo : begin, b = hi < end ? hi : end;
      if (a < b) fn(u, a, units_[u].shard_offset + (a - begin), b - a);
    }
  }

 private:
  int stage_ = 0, shards_ = 1, rank_ = 0;
  size_t flat_ = 0;
  std::vector<ShardUnit> units_;
};

}  // namespace trainer
