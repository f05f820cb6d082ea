// What the CUDA attention tests share (cuda_attention_test.cpp, cuda_attention_documents_test.cpp):
// a case's shape, and one forward and backward through a GPU backend and through the CPU fp32
// reference, optionally with document starts (Data.packing: documents) and the host's measure
// of them.
#pragma once

#include <vector>

#include "cuda_test_util.h"

namespace trainer {
namespace cuda_testing {

struct AttentionCase {
  int B, T, NH, HS;
  int NKV = 0;  // 0: NH (multi-head)
  int kv() const { return NKV == 0 ? NH : NKV; }
  int64_t width() const { return static_cast<int64_t>(NH + 2 * kv()) * HS; }  // of a qkv row
};

struct AttentionResult {
  std::vector<float> out, stats, dqkv;
};

class CudaAttentionFixture : public CudaVsCpuTest {
 protected:
  // Forward then backward (from the backend's own out and stats, as in training); starts: the
  // (B,T) document starts, or empty; documents: their measure, or unknown.
  void RunGpu(CudaBackend* gpu, const AttentionCase& c, const std::vector<float>& qkv,
              const std::vector<float>& dout, AttentionResult* r,
              const std::vector<int32_t>& starts = {},
              const DocumentShape& documents = DocumentShape()) {
    const int64_t B = c.B, T = c.T, C = c.NH * c.HS, W = c.width();
    const DType dtype = gpu->compute_dtype();
    DeviceBuffer g_starts(gpu, DType::kI32, {B, T});
    ASSERT_STATUS_OK(g_starts.UploadInts(starts.empty() ? std::vector<int32_t>(B * T) : starts));
    const Tensor docs = starts.empty() ? Tensor() : g_starts.tensor();
    DeviceBuffer g_qkv(gpu, dtype, {B, T, W}), g_dqkv(gpu, dtype, {B, T, W});
    DeviceBuffer g_out(gpu, dtype, {B, T, C}), g_dout(gpu, dtype, {B, T, C});
    DeviceBuffer g_stats(gpu, DType::kF32, {B, c.NH, T});
    ASSERT_STATUS_OK(g_qkv.Upload(qkv));
    ASSERT_STATUS_OK(g_dout.Upload(dout));
    ASSERT_STATUS_OK(g_dqkv.Upload(std::vector<float>(B * T * W, 7.f)));  // overwritten
    ASSERT_STATUS_OK(gpu->AttentionForward(g_out.tensor(), g_stats.tensor(), g_qkv.tensor(), c.NH,
                                           c.NKV, DropoutKey(), docs, documents));
    ASSERT_STATUS_OK(gpu->AttentionBackward(g_dqkv.tensor(), g_dout.tensor(), g_qkv.tensor(),
                                            g_out.tensor(), g_stats.tensor(), c.NH, c.NKV,
                                            DropoutKey(), docs, documents));
    r->out = g_out.Download();
    r->stats = g_stats.Download();
    r->dqkv = g_dqkv.Download();
    // The forward again: bit for bit the same (the backward may add dq in another order).
    ASSERT_STATUS_OK(gpu->AttentionForward(g_out.tensor(), g_stats.tensor(), g_qkv.tensor(), c.NH,
                                           c.NKV, DropoutKey(), docs, documents));
    EXPECT_BITWISE_EQUAL(g_out.Download(), r->out);
    EXPECT_BITWISE_EQUAL(g_stats.Download(), r->stats);
  }

  void RunCpu(const AttentionCase& c, std::vector<float> qkv, std::vector<float> dout,
              AttentionResult* r, std::vector<int32_t> starts = {}) {
    const int64_t B = c.B, T = c.T, C = c.NH * c.HS, W = c.width();
    const Tensor docs = starts.empty() ? Tensor() : Tensor(starts.data(), DType::kI32, {B, T});
    r->out.assign(B * T * C, 0.f);
    r->stats.assign(B * c.NH * T, 0.f);
    r->dqkv.assign(B * T * W, 0.f);
    ASSERT_STATUS_OK(cpu_->AttentionForward(HostView(r->out, {B, T, C}),
                                            HostView(r->stats, {B, c.NH, T}),
                                            HostView(qkv, {B, T, W}), c.NH, c.NKV, DropoutKey(),
                                            docs));
    ASSERT_STATUS_OK(cpu_->AttentionBackward(
        HostView(r->dqkv, {B, T, W}), HostView(dout, {B, T, C}), HostView(qkv, {B, T, W}),
        HostView(r->out, {B, T, C}), HostView(r->stats, {B, c.NH, T}), c.NH, c.NKV, DropoutKey(),
        docs));
  }
};

}  // namespace cuda_testing
}  // namespace trainer
