// PlanDeviceGroups: the device communicators one rank builds (run_context.cpp) and that the memory
// plan counts, in one place. Each process group spans some of the order string's dimensions
// (topology.h); the dimensions of one member do not change who is in it, so two groups spanning
// the same dimensions of more than one member have the same ranks in the same order, and one
// communicator serves both (a data-parallel-only layout's dp, replica and expert-dp groups are
// one group of ranks: one NCCL communicator, ~0.39 GiB, instead of three). Groups on a stream of
// their own (overlapped gradient reduction) keep their own communicator.
#pragma once

#include <vector>

#include "common/topology.h"

namespace trainer {

enum class DeviceGroup { kTp, kDp, kPp, kSharding, kReplica, kEp, kExpertDp, kEmbedding };

struct DeviceGroupSpec {
  DeviceGroup group;
  unsigned dims;    // the dimensions it spans with more than one member (0: a group of one)
  int members;      // 0: this rank is not in it (the embedding group off the end stages)
  bool own_stream;  // runs on a stream of its own
  int shares = -1;  // the index of the earlier spec whose communicator it uses; -1: its own
};

// The groups of a rank on pipeline stage `stage`, in the order they are built. overlap_dp: the
// dp group reduces on its own stream; overlap_sharding: the sharding group does.
inline std::vector<DeviceGroupSpec> PlanDeviceGroups(const Topology& t, int stage, bool overlap_dp,
                                                     bool overlap_sharding) {
  const std::vector<int> sizes = t.Sizes();
  auto spec = [&](DeviceGroup g, unsigned mask, bool own_stream) {
    DeviceGroupSpec s{g, 0, 1, own_stream};
    for (int i = 0; i < static_cast<int>(sizes.size()); ++i)
      if ((mask & (1u << i)) && sizes[i] > 1) s.dims |= 1u << i, s.members *= sizes[i];
    return s;
  };
  std::vector<DeviceGroupSpec> specs = {
      spec(DeviceGroup::kTp, kDimTp, false),
      spec(DeviceGroup::kDp, kDimSharding | kDimReplica, overlap_dp),
      spec(DeviceGroup::kPp, kDimPp, false),
      spec(DeviceGroup::kSharding, kDimSharding, overlap_sharding),
      spec(DeviceGroup::kReplica, kDimReplica, false),
      spec(DeviceGroup::kEp, kDimEp, false),
      spec(DeviceGroup::kExpertDp, kDimExpertDp, false),
  };
  // The embedding group: the first and last stages' ranks of one (tp, dp) coordinate. With two
  // stages that is the pp group; with more it spans no dimension whole (its own bit).
  const bool ends = t.pp > 1 && (stage == 0 || stage == t.pp - 1);
  DeviceGroupSpec embedding{DeviceGroup::kEmbedding, t.pp == 2 ? kDimPp : (1u << 5), ends ? 2 : 0,
                            false};
  specs.push_back(embedding);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].members < 2 || specs[i].own_stream) continue;
    for (size_t j = 0; j < i && specs[i].shares < 0; ++j)
      if (specs[j].shares < 0 && specs[j].members > 1 && !specs[j].own_stream &&
          specs[j].dims == specs[i].dims)
        specs[i].shares = static_cast<int>(j);
  }
  return specs;
}

// The communicators of more than one member the groups build (each holds NCCL's buffers).
inline int CountOwnCommunicators(const std::vector<DeviceGroupSpec>& specs) {
  int n = 0;
  for (const DeviceGroupSpec& s : specs) n += s.members > 1 && s.shares < 0 ? 1 : 0;
  return n;
}

}  // namespace trainer
