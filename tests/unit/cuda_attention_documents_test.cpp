// GPU tests of attention under Data.packing: documents through cuDNN's fused SDPA over the
// documents as a variable-length batch (attention_cudnn.h; route attention_documents): the
// device's sequences and ragged offsets against their CPU twin (attention_documents.cu vs
// cpu/documents.cpp), then forward (out, statistics) and backward (dqkv) against the CPU fp32
// backend for grouped-query heads, head sizes 64 and 128, T = 64..2048 and several document
// layouts (every token its own document, one per sample, random lengths, B > 1), asserting that
// cuDNN ran every call (path counts) and that the route record says so; either route's backward
// after the other's forward; and the pin that sends the op to our kernels.
#include <cstdio>
#include <tuple>

#include "cuda_attention_fixture.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cuda/kernels.h"
#include "packing_cases.h"

namespace trainer {
namespace cuda_testing {
namespace {

using ::trainer::testing::Packing;
using ::trainer::testing::RandomPacking;

// A device buffer's raw contents.
template <typename V>
std::vector<V> DownloadRaw(Backend* backend, const DeviceBuffer& buffer, size_t count) {
  std::vector<V> out(count);
  EXPECT_TRUE(backend->CopyToHost(out.data(), buffer.tensor().data, count * sizeof(V)).ok());
  return out;
}

class CudaDocumentsTest : public CudaAttentionFixture {
 protected:
  // The sequences of `p` at `capacity` on the device, against cpu::document_sequences.
  template <typename O>
  void CheckSequences(const Packing& p, int capacity) {
    SCOPED_TRACE(StrFormat("B=%d T=%d capacity=%d wide=%d", p.B, p.T, capacity,
                           static_cast<int>(sizeof(O) == 8)));
    const int64_t qkv_row = 7 * 64, out_row = 3 * 64, stats_row = 3;  // NH 3, NKV 2, HS 64
    auto starts = Ints(p.doc_starts, {p.B, p.T});
    DeviceBuffer seq_len(gpu_.get(), DType::kI32, {capacity});
    DeviceBuffer first_row(gpu_.get(), DType::kI32, {capacity + 1});
    DeviceBuffer offsets(gpu_.get(), DType::kI32,
                         {static_cast<int64_t>(3 * (capacity + 1) * sizeof(O) / 4)});
    ASSERT_EQ(cuda::LaunchDocumentSequences(
                  static_cast<int32_t*>(seq_len.tensor().data),
                  static_cast<int32_t*>(first_row.tensor().data), offsets.tensor().data,
                  sizeof(O) == 8, starts->tensor().as<int32_t>(), p.B, p.T, capacity, qkv_row,
                  out_row, stats_row, gpu_->stream()),
              cudaSuccess);
    std::vector<int32_t> want_len(capacity), want_first(capacity + 1);
    cpu::document_sequences(want_len.data(), want_first.data(), p.doc_starts.data(), p.B, p.T,
                            capacity);
    EXPECT_EQ(DownloadRaw<int32_t>(gpu_.get(), seq_len, capacity), want_len);
    EXPECT_EQ(DownloadRaw<int32_t>(gpu_.get(), first_row, capacity + 1), want_first);
    const std::vector<O> got = DownloadRaw<O>(gpu_.get(), offsets, 3 * (capacity + 1));
    for (int i = 0; i <= capacity; ++i) {
      EXPECT_EQ(got[i], static_cast<O>(want_first[i] * qkv_row)) << i;
      EXPECT_EQ(got[capacity + 1 + i], static_cast<O>(want_first[i] * out_row)) << i;
      EXPECT_EQ(got[2 * (capacity + 1) + i], static_cast<O>(want_first[i] * stats_row)) << i;
    }
  }

  // Forward and backward with the documents of `p` on the cuDNN route against the CPU.
  void CheckAttention(const AttentionCase& c, const Packing& p) {
    SCOPED_TRACE(Trace() + StrFormat(", B=%d T=%d NH=%d NKV=%d HS=%d, %d documents", c.B, c.T,
                                     c.NH, c.kv(), c.HS, p.count()));
    ASSERT_EQ(p.B, c.B);
    ASSERT_EQ(p.T, c.T);
    const std::vector<float> qkv = Random(static_cast<size_t>(c.B) * c.T * c.width(), -2.f, 2.f);
    const std::vector<float> dout = Random(static_cast<size_t>(c.B) * c.T * c.NH * c.HS);
    AttentionResult want, got;
    RunCpu(c, qkv, dout, &want, p.doc_starts);
    const DocumentShape documents = MeasureDocuments(p.doc_starts.data(), p.B, p.T);
    RunGpu(gpu_.get(), c, qkv, dout, &got, p.doc_starts, documents);
    EXPECT_RELATIVE_ERROR_BELOW(got.out, want.out, 2e-2);
    EXPECT_RELATIVE_ERROR_BELOW(got.stats, want.stats, 5e-3);
    EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, want.dqkv, 3e-2);
    const CudaPathCounts& paths = gpu_->path_counts();
    std::printf("[document attention] B=%d T=%d NH=%d NKV=%d HS=%d docs=%d longest=%d: "
                "cudnn=%d fallback=%d (out %.2e, stats %.2e, dqkv %.2e)\n",
                c.B, c.T, c.NH, c.kv(), c.HS, documents.count, documents.longest,
                paths.attention_cudnn_documents, paths.attention_fallback,
                RelativeError(got.out, want.out), RelativeError(got.stats, want.stats),
                RelativeError(got.dqkv, want.dqkv));
    EXPECT_EQ(paths.attention_cudnn_documents, 3) << "cuDNN refused documents";  // fwd, bwd, fwd
    EXPECT_EQ(paths.attention_fallback, 0);
    const RouteEntry* route = gpu_->routes()->Find(
        "attention_documents",
        StrFormat("B=%d T=%d NH=%d NKV=%d HS=%d bf16", c.B, c.T, c.NH, c.kv(), c.HS));
    ASSERT_NE(route, nullptr);
    EXPECT_EQ(route->chosen_name(), "cudnn");
  }
};

TEST_F(CudaDocumentsTest, SequencesMatchCpu) {
  const std::vector<Packing> cases = {
      Packing(8, {{8}}),
      Packing(5, {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}}),
      Packing(9, {{3, 4, 2}, {5, 4}}),
      RandomPacking(3, 77, 20, 1),
      RandomPacking(3, 2048, 300, 2),  // more rows than one tile of the kernel's scan
      RandomPacking(5, 1000, 3, 3),    // many documents across tiles
  };
  for (const Packing& p : cases) {
    const int n = p.count();
    for (int capacity : {n, n + 5, std::max(1, n - 1)}) {
      CheckSequences<int32_t>(p, capacity);
      CheckSequences<int64_t>(p, capacity);
    }
  }
}

TEST_F(CudaDocumentsTest, StatisticsTransposeMatchesCpu) {
  const int B = 3, T = 130, NH = 5;
  const std::vector<float> by_head = RandomFloats(B * NH * T, rng_);
  std::vector<float> want_rows(B * T * NH), back(B * NH * T);
  cpu::transpose_attention_stats(want_rows.data(), const_cast<float*>(by_head.data()), B, T, NH,
                                 true);
  auto g_head = F32(by_head, {B, NH, T});
  auto g_rows = F32(std::vector<float>(B * T * NH, -1.f), {B * T, NH});
  ASSERT_EQ(cuda::LaunchTransposeAttentionStats(g_rows->tensor().as<float>(),
                                                g_head->tensor().as<float>(), B, T, NH, true,
                                                gpu_->stream()),
            cudaSuccess);
  EXPECT_BITWISE_EQUAL(g_rows->Download(), want_rows);
  auto g_back = F32(std::vector<float>(B * NH * T, -1.f), {B, NH, T});
  ASSERT_EQ(cuda::LaunchTransposeAttentionStats(g_rows->tensor().as<float>(),
                                                g_back->tensor().as<float>(), B, T, NH, false,
                                                gpu_->stream()),
            cudaSuccess);
  EXPECT_BITWISE_EQUAL(g_back->Download(), by_head);
}

// (case, layout): 0 random lengths up to T/3, 1 one document per sample, 2 every token its own
// document, 3 random lengths up to T (few, long documents).
class CudaDocumentAttentionTest
    : public CudaDocumentsTest,
      public ::testing::WithParamInterface<std::tuple<AttentionCase, int>> {};

Packing Layout(const AttentionCase& c, int layout, unsigned seed) {
  switch (layout) {
    case 1:
      return Packing(c.T, std::vector<std::vector<int>>(c.B, std::vector<int>{c.T}));
    case 2:
      return Packing(c.T, std::vector<std::vector<int>>(c.B, std::vector<int>(c.T, 1)));
    case 3:
      return RandomPacking(c.B, c.T, c.T, seed);
    default:
      return RandomPacking(c.B, c.T, std::max(1, c.T / 3), seed);
  }
}

TEST_P(CudaDocumentAttentionTest, ForwardAndBackwardMatchCpu) {
  if (!CudaBackend::CudnnAttentionCompiled())
    GTEST_SKIP() << "built without the cuDNN frontend (scripts/fetch_cudnn_frontend.sh)";
  const AttentionCase c = std::get<0>(GetParam());
  CheckAttention(c, Layout(c, std::get<1>(GetParam()), seed_));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaDocumentAttentionTest,
    ::testing::Values(std::make_tuple(AttentionCase{2, 64, 4, 64, 2}, 2),
                      std::make_tuple(AttentionCase{2, 64, 4, 64, 2}, 0),
                      std::make_tuple(AttentionCase{2, 77, 3, 64, 1}, 0),
                      std::make_tuple(AttentionCase{1, 130, 2, 128}, 1),
                      std::make_tuple(AttentionCase{3, 256, 4, 128, 2}, 0),
                      std::make_tuple(AttentionCase{2, 1000, 4, 64, 4}, 3),
                      std::make_tuple(AttentionCase{1, 2048, 8, 128, 2}, 0),
                      std::make_tuple(AttentionCase{2, 2048, 4, 64, 1}, 3)));

// The statistics keep the op's layout on either route: our backward after cuDNN's forward (and
// the reverse) gives the CPU's gradients.
TEST_F(CudaDocumentsTest, EitherRoutesBackwardReadsEitherRoutesForward) {
  if (!CudaBackend::CudnnAttentionCompiled()) GTEST_SKIP() << "built without the cuDNN frontend";
  const AttentionCase c{2, 200, 4, 64, 2};
  const Packing p = RandomPacking(c.B, c.T, 70, seed_);
  const DocumentShape measured = MeasureDocuments(p.doc_starts.data(), p.B, p.T);
  const std::vector<float> qkv = Random(static_cast<size_t>(c.B) * c.T * c.width(), -2.f, 2.f);
  const std::vector<float> dout = Random(static_cast<size_t>(c.B) * c.T * c.NH * c.HS);
  AttentionResult want;
  RunCpu(c, qkv, dout, &want, p.doc_starts);
  const int64_t B = c.B, T = c.T, C = c.NH * c.HS, W = c.width();
  auto g_qkv = Compute(qkv, {B, T, W}), g_dout = Compute(dout, {B, T, C});
  auto g_out = Compute(std::vector<float>(B * T * C), {B, T, C});
  auto g_dqkv = Compute(std::vector<float>(B * T * W), {B, T, W});
  auto g_stats = F32(std::vector<float>(B * c.NH * T), {B, c.NH, T});
  auto starts = Ints(p.doc_starts, {B, T});
  for (bool cudnn_forward : {true, false}) {
    SCOPED_TRACE(cudnn_forward ? "cuDNN forward, our backward" : "our forward, cuDNN backward");
    const int before = gpu_->path_counts().attention_cudnn_documents;
    ASSERT_STATUS_OK(gpu_->AttentionForward(g_out->tensor(), g_stats->tensor(), g_qkv->tensor(),
                                            c.NH, c.NKV, DropoutKey(), starts->tensor(),
                                            cudnn_forward ? measured : DocumentShape()));
    ASSERT_STATUS_OK(gpu_->AttentionBackward(
        g_dqkv->tensor(), g_dout->tensor(), g_qkv->tensor(), g_out->tensor(), g_stats->tensor(),
        c.NH, c.NKV, DropoutKey(), starts->tensor(), cudnn_forward ? DocumentShape() : measured));
    EXPECT_EQ(gpu_->path_counts().attention_cudnn_documents, before + 1);
    EXPECT_RELATIVE_ERROR_BELOW(g_stats->Download(), want.stats, 5e-3);
    EXPECT_RELATIVE_ERROR_BELOW(g_dqkv->Download(), want.dqkv, 3e-2);
  }
}

// Engine.gpu_routes can send the documents to our kernels.
TEST_F(CudaDocumentsTest, PinnedToOurKernels) {
  const AttentionCase c{2, 77, 3, 64, 1};
  const std::string shape = StrFormat("B=%d T=%d NH=%d NKV=%d HS=%d bf16", c.B, c.T, c.NH,
                                      c.kv(), c.HS);
  RouteTable table;
  table.Record({"attention_documents", shape, {{"ours", -1.f}}, 0, "pinned"});
  RouteTable pins;
  ASSERT_STATUS_OK(RouteTable::Parse(table.ToJson(), "test-pins.json", &pins));
  ASSERT_STATUS_OK(gpu_->PinRoutes(pins));
  const Packing p = RandomPacking(c.B, c.T, 25, seed_);
  const std::vector<float> qkv = Random(static_cast<size_t>(c.B) * c.T * c.width(), -2.f, 2.f);
  const std::vector<float> dout = Random(static_cast<size_t>(c.B) * c.T * c.NH * c.HS);
  AttentionResult want, got;
  RunCpu(c, qkv, dout, &want, p.doc_starts);
  RunGpu(gpu_.get(), c, qkv, dout, &got, p.doc_starts,
         MeasureDocuments(p.doc_starts.data(), p.B, p.T));
  EXPECT_RELATIVE_ERROR_BELOW(got.dqkv, want.dqkv, 3e-2);
  EXPECT_EQ(gpu_->path_counts().attention_cudnn, 0);
  const RouteEntry* route = gpu_->routes()->Find("attention_documents", shape);
  ASSERT_NE(route, nullptr);
  EXPECT_EQ(route->chosen_name(), "ours");
  EXPECT_EQ(route->how, "pinned");
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
