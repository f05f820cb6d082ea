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

#include "common/master_remainder.h"
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
  // bf16 weights: nearly the same master weights rounded (to even offloaded, ties away from zero
  // on the device, which keeps the masters as halves): one bf16 step apart at most.
  ExpectNear(whole.weights, device.weights, 1e-5, 1.0 / 128, "bf16 weights");
}

// Optimizer.store_param_remainders (the default with bf16 weights on the GPU): from the same given
// gradients, the master weights and both moments equal those of a separate f32 master copy to the
// bit (the same update of the same values), and the bf16 weights are the master's high halves
// (rounded ties away from zero where the f32 copy's round to even: they differ at ties alone).
// Set again from the downloaded master, as a resume does, a new optimizer holds the same weights
// and gives the same master back; AddToParameters (the MoE expert bias) moves both alike.
TEST(GpuAdamWMasterHalves, SameStateAsAnF32MasterAndResumesToTheBit) {
  const ModelConfig config = TinyLlama(true, false, false);
  const OffloadRun halves = TrainTiny(config, Gpu(), 0, true, 3, true);
  const OffloadRun f32 = TrainTiny(config, Gpu(), 0, true, 3, false);
  ASSERT_GT(halves.master.size(), 4000u);
  EXPECT_EQ(halves.master, f32.master) << "master weights";
  EXPECT_EQ(halves.m, f32.m) << "first moments";
  EXPECT_EQ(halves.v, f32.v) << "second moments";
  size_t ties = 0;
  for (size_t i = 0; i < halves.master.size(); ++i) {
    ASSERT_EQ(halves.weights[i], BF16ToFloat(MasterHigh(halves.master[i]))) << i;
    ASSERT_EQ(f32.weights[i], BF16ToFloat(FloatToBF16(halves.master[i]))) << i;
    ties += halves.weights[i] != f32.weights[i];
  }
  EXPECT_LE(ties, halves.master.size() / 1000) << "the two roundings differ beyond ties";

  // A resume: a new model and optimizer set from the master weights.
  std::unique_ptr<Backend> backend = Gpu();
  ModelPartition part;
  part.num_layers = config.num_layers;
  std::unique_ptr<GptModel> model;
  ASSERT_TRUE(GptModel::Create(config, part, backend.get(), nullptr, 2, 7, 1, &model).ok());
  std::unique_ptr<AdamW> opt;
  ASSERT_TRUE(AdamW::Create(model.get(), OptimizerConfig(), nullptr, &opt).ok());
  ASSERT_TRUE(opt->master_halves());
  ASSERT_TRUE(opt->SetMaster(halves.master).ok());
  std::vector<float> master;
  ASSERT_TRUE(opt->Download(0, &master).ok());
  EXPECT_EQ(master, halves.master) << "the master downloaded after SetMaster";
  const Tensor weights = model->parameter_buffer();
  std::vector<uint16_t> bf16(static_cast<size_t>(weights.numel()));
  ASSERT_TRUE(backend->CopyToHost(bf16.data(), weights.data, weights.bytes()).ok());
  for (size_t i = 0; i < halves.master.size(); ++i)
    ASSERT_EQ(BF16ToFloat(bf16[i]), halves.weights[i]) << i;
  // AddToParameters over a span: the master moves by the delta as f32 arithmetic moves it.
  const size_t at = 1000;
  std::vector<float> delta(333);
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = 1e-3f * static_cast<float>(i % 7) - 2e-3f;
  ASSERT_TRUE(opt->AddToParameters(at, delta).ok());
  ASSERT_TRUE(opt->Download(0, &master).ok());
  for (size_t i = 0; i < halves.master.size(); ++i) {
    const bool in = i >= at && i < at + delta.size();
    ASSERT_EQ(master[i], in ? halves.master[i] + delta[i - at] : halves.master[i]) << i;
  }
  ASSERT_TRUE(backend->CopyToHost(bf16.data(), weights.data, weights.bytes()).ok());
  for (size_t i = at; i < at + delta.size(); ++i) ASSERT_EQ(bf16[i], MasterHigh(master[i])) << i;
}

}  // namespace
}  // namespace trainer
