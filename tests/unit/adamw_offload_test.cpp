// The offloaded AdamW (Distributed.sharding.sharding_offload, optimizer/adamw_offload.cpp) on the
// CPU backend: steps through a staging ring of small chunks (many chunks, the ring wrapping
// around its slots, chunk edges inside parameters and units) leave the master weights, both
// moments and the model's weights bit-identical to the unchunked offload and to the AdamW
// without offload. The chunked runs also go through a backend whose asynchronous copies happen
// only when a copy mark is waited for, as on a GPU's stream: a step that read a chunk before
// its copies arrived, or refilled a slot before its weights left, would differ. The planned host
// bytes equal the allocator's count, and the host backend's large buffers stay unresident until
// written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "model/cpu/cpu_backend.h"
#include "model/gpt.h"
#include "model_test_util.h"
#include "offload_test_util.h"
#include "optimizer/adamw.h"

namespace trainer {
namespace {

// A CPU backend whose CopyToHostAsync / CopyToDeviceAsync run late: queued, and run in order
// only when WaitForCopies reaches the mark recorded after them (or at Synchronize), like the
// copies of a GPU's stream; between the two, the destination still holds what it held.
class DeferredCopyBackend : public CpuBackend {
 public:
  Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes) override {
    return Queue(host_dst, src, bytes);
  }
  Status CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes) override {
    return Queue(dst, host_src, bytes);
  }
  Status RecordCopies(int mark) override {
    EXPECT_TRUE(mark >= 0 && mark < kMaxCopyMarks);
    marks_[mark] = queued_.size();
    ++recorded_;
    return Status::Ok();
  }
  Status WaitForCopies(int mark) override {
    RunUpTo(marks_[mark]);
    ++waited_;
    return Status::Ok();
  }
  Status Synchronize() override {
    RunUpTo(queued_.size());
    return Status::Ok();
  }
  int recorded() const { return recorded_; }
  int waited() const { return waited_; }
  size_t pending() const { return queued_.size() - done_; }

 private:
  Status Queue(void* dst, const void* src, size_t bytes) {
    queued_.push_back([=] { return CopyToDevice(dst, src, bytes); });
    return Status::Ok();
  }
  void RunUpTo(size_t end) {
    for (; done_ < end; ++done_) EXPECT_TRUE(queued_[done_]().ok());
  }
  std::vector<std::function<Status()>> queued_;
  size_t done_ = 0;
  size_t marks_[kMaxCopyMarks] = {};
  int recorded_ = 0, waited_ = 0;
};

class AdamWOffload : public ::testing::TestWithParam<ModelCase> {};

TEST_P(AdamWOffload, ChunkedRingIsBitIdenticalToUnchunkedAndToNoOffload) {
  const ModelConfig& config = GetParam().config;
  const OffloadRun plain = TrainTiny(config, MakeCpuBackend(), 0);
  const OffloadRun whole = TrainTiny(config, MakeCpuBackend(), AdamW::kOffloadChunkElements);
  ASSERT_FALSE(plain.master.empty());
  ASSERT_GT(plain.master.size(), 4000u);  // so that the chunks below wrap the ring many times
  ExpectBitIdentical(whole, plain, "one chunk against no offload");
  // 1000 and 777 elements: edges inside parameters and units, a short last chunk; 64: the
  // smallest unit's alignment; the shard's size less one: two chunks, the second of one element.
  for (size_t chunk : {size_t{1000}, size_t{777}, size_t{64}, plain.master.size() - 1}) {
    auto deferred = std::make_unique<DeferredCopyBackend>();
    DeferredCopyBackend* copies = deferred.get();
    const OffloadRun chunked = TrainTiny(config, std::move(deferred), chunk);
    ExpectBitIdentical(chunked, whole, "chunks of " + std::to_string(chunk));
    EXPECT_GE(copies->recorded(), 3 * 2) << "chunks of " << chunk;  // every step, every chunk
    EXPECT_EQ(copies->recorded(), copies->waited()) << "chunks of " << chunk;
  }
}

// The same with gradients written into the model's buffer, as gpu_offload_test gives them.
TEST(AdamWOffloadGiven, ChunkedRingOnGivenGradientsIsBitIdenticalToNoOffload) {
  const ModelConfig config = TinyLlama(false, false, true);
  const OffloadRun plain = TrainTiny(config, MakeCpuBackend(), 0, true);
  const OffloadRun chunked = TrainTiny(config, std::make_unique<DeferredCopyBackend>(), 1000, true);
  ExpectBitIdentical(chunked, plain, "chunks of 1000 on given gradients");
}

TEST(AdamWOffloadPlan, PlannedHostBytesMatchTheAllocatorsHighWaterMark) {
  const ModelConfig config = TinyLlama(true, true, false);
  ModelPartition part;
  part.num_layers = config.num_layers;
  std::unique_ptr<Backend> backend = MakeCpuBackend();
  std::unique_ptr<GptModel> model;
  ASSERT_TRUE(GptModel::Create(config, part, backend.get(), nullptr, 2, 7, 1, &model).ok());
  for (size_t chunk : {size_t{1000}, AdamW::kOffloadChunkElements}) {
    std::unique_ptr<AdamW> opt;
    ASSERT_TRUE(AdamW::Create(model.get(), OptimizerConfig(), nullptr, &opt, true, chunk).ok());
    const size_t n = FlatBufferElements(model->parameters(), 1), slot = std::min(n, chunk);
    // The state (3 x 4 bytes per element) and two slots of gradients and weights (f32: the CPU
    // computes in f32, so no compute-dtype copy), each allocation rounded to 256 bytes.
    const size_t expected = 3 * Backend::AllocationSize(n * 4) +
                            (n > chunk ? 2 : 1) * 2 * Backend::AllocationSize(slot * 4);
    EXPECT_EQ(AdamW::OffloadedBytes(model->parameters(), 1, DType::kF32, chunk), expected);
    EXPECT_EQ(opt->OffloadPeakBytes(), expected) << "chunk " << chunk;
  }
}

// Resident memory of this process (/proc/self/statm), in bytes.
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// The host backend's large allocations (the offloaded master weights and moments) are zero and
// take memory only as they are written: the moments cost nothing while the trainer still holds
// the initial weights at setup.
TEST(AdamWOffloadPlan, LargeHostAllocationsAreZeroAndResidentOnlyWhenWritten) {
  std::unique_ptr<Backend> host = MakeCpuBackend();
  const size_t bytes = size_t{256} << 20;
  const size_t before = ResidentBytes();
  void* p = nullptr;
  ASSERT_TRUE(host->Allocate(bytes, &p).ok());
  EXPECT_LT(ResidentBytes(), before + bytes / 8);
  const float* f = static_cast<const float*>(p);
  for (size_t i = 0; i < bytes / 4; i += 4096) ASSERT_EQ(f[i], 0.f) << i;
  std::memset(p, 1, bytes);
  EXPECT_GT(ResidentBytes(), before + bytes / 2);
  EXPECT_EQ(host->PeakAllocatedBytes(), bytes);
  host->Free(p);
  EXPECT_LT(ResidentBytes(), before + bytes / 8);
}

const ModelCase kCases[] = {
    {"gpt2", TinyModel()},
    {"llama", TinyLlama(true, true, false)},
};

INSTANTIATE_TEST_SUITE_P(Architectures, AdamWOffload, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace trainer
