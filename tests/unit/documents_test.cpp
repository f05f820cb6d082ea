// Packed documents (Data.packing: documents) as a variable-length batch, on the CPU: the host's
// measure (MeasureDocuments), the graph bucket (DocumentBucket), the sequences of doc_starts
// (cpu::document_sequences, the twin of the CUDA kernel that feeds cuDNN's ragged attention) and
// the statistics' two layouts. Each is compared with the document lengths the case is built
// from, not with doc_starts: one document per sample, every token its own document, a sample
// starting mid-document, B > 1, and capacities below and above the count.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/documents.h"
#include "packing_cases.h"

namespace trainer {
namespace {

using testing::Packing;
using testing::RandomPacking;

std::vector<Packing> Cases() {
  return {
      Packing(8, {{8}}),                                  // one document
      Packing(6, {{6}, {6}, {6}}),                        // one per sample, B = 3
      Packing(5, {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}}),     // every token its own document
      Packing(9, {{3, 4, 2}, {5, 4}}),                    // sample 1 starts mid-document
      Packing(7, {{1, 6}, {6, 1}}),                       // single tokens at either end
      RandomPacking(4, 300, 90, 1),
      RandomPacking(2, 2048, 700, 2),
  };
}

TEST(Documents, MeasureCountsDocumentsAndTheLongest) {
  for (const Packing& p : Cases()) {
    SCOPED_TRACE(::testing::Message() << "B=" << p.B << " T=" << p.T);
    const DocumentShape d = MeasureDocuments(p.doc_starts.data(), p.B, p.T);
    EXPECT_EQ(d.count, p.count());
    EXPECT_EQ(d.longest, p.longest());
    EXPECT_TRUE(d.known());
  }
  EXPECT_FALSE(DocumentShape().known());
}

// Sequences in row order: sample by sample, each sample's documents left to right.
TEST(Documents, SequencesFollowTheDocumentsInRowOrder) {
  for (const Packing& p : Cases()) {
    const int n = p.count();
    for (int capacity : {n, n + 3, 2 * n, std::max(1, n - 1)}) {
      SCOPED_TRACE(::testing::Message() << "B=" << p.B << " T=" << p.T << " capacity=" << capacity);
      std::vector<int32_t> want_len(capacity, 0), want_first(capacity + 1, p.B * p.T);
      int i = 0;
      for (int b = 0; b < p.B; ++b) {
        int row = b * p.T;
        for (int length : p.lengths[b]) {
          if (i < capacity) {
            want_len[i] = length;
            want_first[i] = row;
          }
          ++i;
          row += length;
        }
      }
      std::vector<int32_t> len(capacity, -1), first(capacity + 1, -1);
      cpu::document_sequences(len.data(), first.data(), p.doc_starts.data(), p.B, p.T, capacity);
      EXPECT_EQ(len, want_len);
      EXPECT_EQ(first, want_first);
      if (capacity >= n) {  // every row in exactly one sequence
        EXPECT_EQ(std::accumulate(len.begin(), len.end(), 0), p.B * p.T);
      }
    }
  }
}

TEST(Documents, BucketRoundsUpToPowersOfTwo) {
  const auto bucket = [](int count, int longest, int T) {
    const DocumentShape b = DocumentBucket(DocumentShape{count, longest}, T);
    return std::make_pair(b.count, b.longest);
  };
  EXPECT_EQ(bucket(1, 8, 8), std::make_pair(1, 8));  // longest capped at T
  EXPECT_EQ(bucket(3, 10, 1024), std::make_pair(4, 64));
  EXPECT_EQ(bucket(4, 64, 1024), std::make_pair(4, 64));
  EXPECT_EQ(bucket(5, 65, 1024), std::make_pair(8, 128));
  EXPECT_EQ(bucket(17, 1000, 1000), std::make_pair(32, 1000));
  EXPECT_EQ(bucket(4096, 1, 4096), std::make_pair(4096, 64));
  for (const Packing& p : Cases()) {  // a bucket holds what it was made from
    const DocumentShape d = MeasureDocuments(p.doc_starts.data(), p.B, p.T);
    const DocumentShape b = DocumentBucket(d, p.T);
    EXPECT_GE(b.count, d.count);
    EXPECT_LT(b.count, 2 * d.count);
    EXPECT_GE(b.longest, d.longest);
    EXPECT_LE(b.longest, p.T);
  }
}

TEST(Documents, StatisticsLayoutsTranspose) {
  const int B = 2, T = 5, NH = 3;
  std::vector<float> by_head(B * NH * T), by_row(B * T * NH, -1.f), back(B * NH * T, -1.f);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) by_head[(b * NH + h) * T + t] = 100.f * b + 10.f * h + t;
  cpu::transpose_attention_stats(by_row.data(), by_head.data(), B, T, NH, /*to_rows=*/true);
  for (int r = 0; r < B * T; ++r)
    for (int h = 0; h < NH; ++h)
      EXPECT_EQ(by_row[r * NH + h], 100.f * (r / T) + 10.f * h + r % T) << r << " " << h;
  cpu::transpose_attention_stats(by_row.data(), back.data(), B, T, NH, /*to_rows=*/false);
  EXPECT_EQ(back, by_head);
}

// The attention contract holds the host's measure to the batch.
TEST(Documents, AttentionRefusesAMeasureThatDoesNotFit) {
  const int B = 2, T = 4, NH = 1, HS = 2;
  CpuBackend cpu;
  std::vector<float> qkv(B * T * 3 * NH * HS, 0.5f), out(B * T * NH * HS), stats(B * NH * T);
  std::vector<int32_t> starts = {0, 0, 2, 2, 0, 1, 1, 1};
  const Tensor q(qkv.data(), DType::kF32, {B, T, 3 * NH * HS});
  const Tensor o(out.data(), DType::kF32, {B, T, NH * HS});
  const Tensor st(stats.data(), DType::kF32, {B, NH, T});
  const Tensor docs(starts.data(), DType::kI32, {B, T});
  const DocumentShape measured = MeasureDocuments(starts.data(), B, T);
  EXPECT_EQ(measured.count, 4);
  EXPECT_TRUE(cpu.AttentionForward(o, st, q, NH, 0, DropoutKey(), docs, measured).ok());
  const Status too_many = cpu.AttentionForward(o, st, q, NH, 0, DropoutKey(), docs,
                                               DocumentShape{B * T + 1, 1});
  EXPECT_FALSE(too_many.ok());
  EXPECT_NE(too_many.message().find("documents count"), std::string::npos) << too_many.message();
  EXPECT_FALSE(cpu.AttentionForward(o, st, q, NH, 0, DropoutKey(), docs, DocumentShape{4, T + 1})
                   .ok());
  EXPECT_FALSE(
      cpu.AttentionForward(o, st, q, NH, 0, DropoutKey(), Tensor(), measured).ok());  // no starts
}

}  // namespace
}  // namespace trainer
