// The offloaded AdamW (Distributed.sharding.sharding_offload) on the GPU, bf16 weights: the
// staging ring's page-locked slots and asynchronous copies on the backend's stream. From the same
// given gradients, chunks of 1000 and 64 elements (the ring of two slots wrapping many times,
// copies of one chunk in flight while the CPU updates the next) leave the master weights, both
// moments and the bf16 weights bit-identical to one chunk; and all of them agree with the AdamW
// kernel on the device without offload (another implementation of the same update) to within
// float rounding. A chunk read before its gradients arrived, or a slot refilled before its
// weights left, would miss by a whole update (lr = 1e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "offload_test_util.h"

namespace trainer {
namespace {

std::unique_ptr<Backend> Gpu() {
  std::unique_ptr<Backend> backend;
  const Status status = MakeCudaBackend(0, &backend, DType::kBF16);
  EXPECT_TRUE(status.ok()) << status.message();
  return backend;
}

// |got - want| <= abs + rel * |want| for every element.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double abs,
                double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double{got[i]} - want[i]);
    if (err > abs + rel * std::fabs(want[i])) ++bad;
    if (err > worst_err) worst_err = err, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": worst at " << worst << ", " << got[worst] << " against "
                     << want[worst];
}

TEST(GpuAdamWOffload, ChunkedRingIsBitIdenticalToOneChunkAndNearTheDeviceAdamW) {
  const ModelConfig config = TinyLlama(true, false, false);
  const OffloadRun device = TrainTiny(config, Gpu(), 0, true);
  const OffloadRun whole = TrainTiny(config, Gpu(), AdamW::kOffloadChunkElements, true);
  ASSERT_GT(whole.master.size(), 4000u);
  for (size_t chunk : {size_t{1000}, size_t{64}}) {
    const OffloadRun chunked = TrainTiny(config, Gpu(), chunk, true);
    ExpectBitIdentical(chunked, whole, "chunks of " + std::to_string(chunk));
  }
  // Three steps of at most ~lr each: a stale or missing chunk is off by ~1e-2.
  ExpectNear(whole.master, device.master, 1e-5, 1e-5, "master weights against the device AdamW");
  ExpectNear(whole.m, device.m, 1e-7, 1e-5, "first moments against the device AdamW");
  ExpectNear(whole.v, device.v, 1e-9, 1e-5, "second moments against the device AdamW");
  // bf16 weights: the same rounding of nearly the same master weights (one bf16 step apart at
  // most).
  ExpectNear(whole.weights, device.weights, 1e-5, 1.0 / 128, "bf16 weights");
}

}  // namespace
}  // namespace trainer
