// GPU tests of the vocabulary-parallel cross-entropy passes (padding masked, a shard without the
// target, a shard with no real columns, dlogits written over the logits), AdamW and the sum of
// squares, against the CPU fp32 backend and a double-precision host loop.
#include <cmath>
#include <cstring>

#include "common/master_remainder.h"
#include "cuda_test_util.h"

namespace trainer {
namespace cuda_testing {
namespace {

std::vector<float> Minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

struct CrossEntropyCase {
  int N, vocab_local, vocab_start, vocab_size;
  int ignore_every = 0;  // > 0: targets 1, 1 + ignore_every, ... are -1 (loss mask 0: ignored)
};

// Sets the ignored targets of case c to -1.
void IgnoreTargets(const CrossEntropyCase& c, std::vector<int32_t>* targets) {
  if (c.ignore_every > 0)
    for (size_t n = 1; n < targets->size(); n += static_cast<size_t>(c.ignore_every))
      (*targets)[n] = -1;
}

class CudaCrossEntropyTest : public CudaVsCpuTest,
                             public ::testing::WithParamInterface<CrossEntropyCase> {};

TEST_P(CudaCrossEntropyTest, ThreePassesMatchCpu) {
  const CrossEntropyCase c = GetParam();
  SCOPED_TRACE(Trace() + StrFormat(", N=%d Vlocal=%d vocab_start=%d vocab_size=%d", c.N,
                                   c.vocab_local, c.vocab_start, c.vocab_size));
  const int N = c.N, V = c.vocab_local;
  std::vector<float> logits = Random(static_cast<size_t>(N) * V, -4.f, 4.f);
  std::vector<int32_t> targets = RandomInts(N, rng_, 0, c.vocab_size - 1);
  IgnoreTargets(c, &targets);
  const float scale = 1.f / N;
  std::vector<float> row_max(N), sums(2 * N), losses(N), dlogits(static_cast<size_t>(N) * V);
  ASSERT_STATUS_OK(cpu_->CrossEntropyRowMax(HostView(row_max, {N}), HostView(logits, {N, V}),
                                            c.vocab_start, c.vocab_size));
  ASSERT_STATUS_OK(cpu_->CrossEntropySums(HostView(sums, {2, N}), HostView(logits, {N, V}),
                                          HostView(row_max, {N}), HostView(targets, {N}),
                                          c.vocab_start, c.vocab_size));
  const bool has_real_columns = c.vocab_start < c.vocab_size;
  if (has_real_columns)
    ASSERT_STATUS_OK(cpu_->CrossEntropyBackward(HostView(losses, {N}), HostView(dlogits, {N, V}),
                                                HostView(logits, {N, V}), HostView(row_max, {N}),
                                                HostView(sums, {2, N}), HostView(targets, {N}),
                                                c.vocab_start, c.vocab_size, scale));

  auto g_logits = Compute(logits, {N, V});
  auto g_targets = Ints(targets, {N});
  auto g_max = F32(std::vector<float>(N), {N}), g_sums = F32(std::vector<float>(2 * N), {2, N});
  auto g_losses = F32(std::vector<float>(N), {N});
  ASSERT_STATUS_OK(
      gpu_->CrossEntropyRowMax(g_max->tensor(), g_logits->tensor(), c.vocab_start, c.vocab_size));
  const std::vector<float> got_max = g_max->Download();
  if (!has_real_columns) {  // no real column on this shard: -inf, for the max all-reduce
    for (float m : got_max) EXPECT_EQ(m, -INFINITY);
    return;
  }
  EXPECT_EQ(got_max, row_max);  // a max of the same bf16 values is exact
  ASSERT_STATUS_OK(gpu_->CrossEntropySums(g_sums->tensor(), g_logits->tensor(), g_max->tensor(),
                                          g_targets->tensor(), c.vocab_start, c.vocab_size));
  ASSERT_STATUS_OK(gpu_->CrossEntropyBackward(
      g_losses->tensor(), g_logits->tensor(), g_logits->tensor(), g_max->tensor(), g_sums->tensor(),
      g_targets->tensor(), c.vocab_start, c.vocab_size, scale));
  EXPECT_RELATIVE_ERROR_BELOW(g_sums->Download(), sums, 1e-5);
  EXPECT_RELATIVE_ERROR_BELOW(g_losses->Download(), losses, 1e-5);
  const std::vector<float> got_dlogits = g_logits->Download();  // written over the logits
  EXPECT_RELATIVE_ERROR_BELOW(got_dlogits, dlogits, 1e-2);
  // Padding columns carry exactly zero gradient.
  for (int n = 0; n < N; ++n)
    for (int v = std::max(0, c.vocab_size - c.vocab_start); v < V; ++v)
      ASSERT_EQ(got_dlogits[static_cast<size_t>(n) * V + v], 0.f) << "row " << n << " col " << v;
}

// The one-kernel path (whole vocabulary on the rank) against the CPU's three passes: losses, and
// dlogits written over the logits. Every fourth row's target logit is far above the rest, so its
// probability is close to 1 and its gradient, scale * (p - 1), is small: the kernel must not take
// it from the rounded p.
TEST_P(CudaCrossEntropyTest, FusedMatchesCpu) {
  const CrossEntropyCase c = GetParam();
  if (c.vocab_start != 0) GTEST_SKIP() << "the fused kernel holds the whole vocabulary";
  SCOPED_TRACE(Trace() + StrFormat(", N=%d V=%d vocab_size=%d", c.N, c.vocab_local, c.vocab_size));
  const int N = c.N, V = c.vocab_local;
  std::vector<float> logits = Random(static_cast<size_t>(N) * V, -4.f, 4.f);
  std::vector<int32_t> targets = RandomInts(N, rng_, 0, c.vocab_size - 1);
  for (int n = 0; n < N; n += 4) logits[static_cast<size_t>(n) * V + targets[n]] = 14.f;
  IgnoreTargets(c, &targets);
  auto g_logits = Compute(logits, {N, V});
  logits = g_logits->Download();  // the values the GPU holds (rounded to bf16 there)
  const float scale = 1.f / N;
  std::vector<float> row_max(N), sums(2 * N), losses(N), dlogits(static_cast<size_t>(N) * V);
  ASSERT_STATUS_OK(cpu_->CrossEntropyFused(
      HostView(losses, {N}), HostView(dlogits, {N, V}), HostView(logits, {N, V}),
      HostView(row_max, {N}), HostView(sums, {2, N}), HostView(targets, {N}), c.vocab_size, scale));
  auto g_targets = Ints(targets, {N});
  auto g_max = F32(std::vector<float>(N), {N}), g_sums = F32(std::vector<float>(2 * N), {2, N});
  auto g_losses = F32(std::vector<float>(N), {N});
  ASSERT_STATUS_OK(gpu_->CrossEntropyFused(g_losses->tensor(), Tensor(), g_logits->tensor(),
                                           g_max->tensor(), g_sums->tensor(), g_targets->tensor(),
                                           c.vocab_size, scale));  // the loss alone (evaluation)
  const std::vector<float> loss_alone = g_losses->Download();
  EXPECT_RELATIVE_ERROR_BELOW(loss_alone, losses, 1e-5);
  ASSERT_STATUS_OK(gpu_->CrossEntropyFused(g_losses->tensor(), g_logits->tensor(),
                                           g_logits->tensor(), g_max->tensor(), g_sums->tensor(),
                                           g_targets->tensor(), c.vocab_size, scale));
  // In place (the gradient over the logits, as in training): the same losses, bit for bit; the
  // target's logit must be read before the row is overwritten.
  EXPECT_BITWISE_EQUAL(g_losses->Download(), loss_alone);
  const std::vector<float> got = g_logits->Download();
  EXPECT_RELATIVE_ERROR_BELOW(got, dlogits, 1e-2);
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) {  // ignored: no loss, a zero gradient row
      EXPECT_EQ(loss_alone[n], 0.f) << "row " << n;
      for (int v = 0; v < V; ++v)
        ASSERT_EQ(got[static_cast<size_t>(n) * V + v], 0.f) << "row " << n << " col " << v;
      continue;
    }
    const size_t t = static_cast<size_t>(n) * V + targets[n];
    EXPECT_NEAR(got[t], dlogits[t], 1e-2 * std::fabs(dlogits[t])) << "target of row " << n;
    for (int v = c.vocab_size; v < V; ++v)
      ASSERT_EQ(got[static_cast<size_t>(n) * V + v], 0.f) << "row " << n << " col " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, CudaCrossEntropyTest,
                         ::testing::Values(CrossEntropyCase{37, 384, 0, 300},     // padded vocab
                                           CrossEntropyCase{29, 128, 128, 200},   // 2nd shard
                                           CrossEntropyCase{7, 301, 0, 290},      // unaligned rows
                                           CrossEntropyCase{5, 128, 256, 200},    // all padding
                                           CrossEntropyCase{3, 50304, 0, 50257},  // GPT-2
                                           CrossEntropyCase{37, 384, 0, 300, 3},  // ignored targets
                                           CrossEntropyCase{29, 128, 128, 200, 2}));

// One AdamW step's inputs over n elements, and a later step's parameters (weight decay, a clip
// scale), for the GPU against the CPU.
struct AdamWInputs {
  AdamWInputs(int n, std::mt19937& rng)
      : master0(RandomFloats(n, rng)),
        grad(RandomFloats(n, rng)),
        m0(RandomFloats(n, rng, -0.01f, 0.01f)),
        v0(RandomFloats(n, rng, 0.f, 1e-3f)) {
    p.lr = 1e-3f;
    p.weight_decay = 0.1f;
    p.step = 3;
    p.grad_scale = 0.5f;
  }
  std::vector<float> master0, grad, m0, v0;
  AdamWParams p;
};

// Elements offset.. of x.
template <typename T>
std::vector<T> Tail(const std::vector<T>& x, int offset) {
  return std::vector<T>(x.begin() + offset, x.end());
}

TEST_F(CudaVsCpuTest, AdamWMatchesCpu) {
  SCOPED_TRACE(Trace());
  const int n = 5003;
  const AdamWInputs in(n, rng_);
  const std::vector<float>&master0 = in.master0, &grad = in.grad, &m0 = in.m0, &v0 = in.v0;
  const AdamWParams& p = in.p;
  // Offset 0: four elements per thread where aligned, one for the last three; offset 1 (a span
  // that starts inside a 16-byte word): one element per thread throughout.
  for (int offset : {0, 1}) {
    SCOPED_TRACE(StrFormat("span [%d, %d)", offset, n));
    const int count = n - offset;
    auto tail = [&](const std::vector<float>& x) { return Tail(x, offset); };
    std::vector<float> master = tail(master0), m = tail(m0), v = tail(v0), param(count),
                       g = tail(grad);
    ASSERT_STATUS_OK(cpu_->AdamW(HostView(param, {count}), HostView(master, {count}),
                                 HostView(g, {count}), HostView(m, {count}), HostView(v, {count}),
                                 p));
    auto g_param = Compute(std::vector<float>(n), {n});
    auto g_master = F32(master0, {n}), g_grad = F32(grad, {n}), g_m = F32(m0, {n}),
         g_v = F32(v0, {n});
    ASSERT_STATUS_OK(
        gpu_->AdamW(g_param->tensor().rows(offset, count), g_master->tensor().rows(offset, count),
                    g_grad->tensor().rows(offset, count), g_m->tensor().rows(offset, count),
                    g_v->tensor().rows(offset, count), p));
    EXPECT_RELATIVE_ERROR_BELOW(Minus(tail(g_master->Download()), tail(master0)),
                                Minus(master, tail(master0)), 1e-4);
    EXPECT_RELATIVE_ERROR_BELOW(tail(g_m->Download()), m, 1e-6);
    EXPECT_RELATIVE_ERROR_BELOW(tail(g_v->Download()), v, 1e-6);
    // The bf16 copy is the updated master rounded to nearest even (a master one f32 ulp away may
    // round the other way on a tie: the tolerance allows a few such elements, not truncation).
    EXPECT_RELATIVE_ERROR_BELOW(tail(g_param->Download()), Rounded(master, DType::kBF16), 2e-4);
    // Elements before the span stay as they were.
    if (offset > 0) {
      EXPECT_EQ(g_master->Download()[0], master0[0]);
    }
  }
}

// The clipping scale taken on the device from a sum of squares in device memory, against the CPU
// step with the scale worked out here: max_norm / (norm + 1e-6) when the norm is above max_norm.
TEST_F(CudaVsCpuTest, AdamWTakesTheClipScaleFromTheDevice) {
  SCOPED_TRACE(Trace());
  const int n = 4099;
  for (const double sum_squares : {9.0, 0.04}) {  // norm 3 (clipped to 0.5), norm 0.2 (kept)
    SCOPED_TRACE(StrFormat("sum of squares %g", sum_squares));
    const std::vector<float> master0 = RandomFloats(n, rng_);
    std::vector<float> grad = RandomFloats(n, rng_), master = master0, m(n, 0.f), v(n, 0.f),
                       param(n);
    AdamWParams p;
    p.lr = 1e-3f;
    p.grad_scale = sum_squares > 1 ? static_cast<float>(0.5 / (3.0 + 1e-6)) : 1.f;
    ASSERT_STATUS_OK(cpu_->AdamW(HostView(param, {n}), HostView(master, {n}), HostView(grad, {n}),
                                 HostView(m, {n}), HostView(v, {n}), p));
    DeviceBuffer total(gpu_.get(), DType::kF64, {1});
    ASSERT_STATUS_OK(gpu_->CopyToDevice(total.tensor().data, &sum_squares, sizeof(double)));
    auto g_param = Compute(std::vector<float>(n), {n});
    auto g_master = F32(master0, {n}), g_grad = F32(grad, {n});
    auto g_m = F32(std::vector<float>(n), {n}), g_v = F32(std::vector<float>(n), {n});
    p.grad_scale = 123.f;  // ignored: the device's sum of squares decides
    p.grad_sum_squares = static_cast<const double*>(total.tensor().data);
    p.max_grad_norm = 0.5;
    ASSERT_STATUS_OK(gpu_->AdamW(g_param->tensor(), g_master->tensor(), g_grad->tensor(),
                                 g_m->tensor(), g_v->tensor(), p));
    EXPECT_RELATIVE_ERROR_BELOW(Minus(g_master->Download(), master0), Minus(master, master0), 1e-4);
    EXPECT_RELATIVE_ERROR_BELOW(g_m->Download(), m, 1e-6);
  }
}

// The master weights as two halves (Optimizer.store_param_remainders): the GPU's update against
// the CPU's on halves (to float rounding, as AdamWMatchesCpu), the bf16 weights the updated
// master's high halves to the bit, and both kernels (offset 1: the one-element kernel).
TEST_F(CudaVsCpuTest, AdamWOnMasterHalvesMatchesCpu) {
  SCOPED_TRACE(Trace());
  const int n = 5003;
  const AdamWInputs in(n, rng_);
  const std::vector<float>&master0 = in.master0, &grad = in.grad, &m0 = in.m0, &v0 = in.v0;
  const AdamWParams& p = in.p;
  std::vector<uint16_t> high0(n), low0(n);
  for (int i = 0; i < n; ++i)
    high0[i] = MasterHigh(master0[i]), low0[i] = MasterRemainder(master0[i]);
  for (int offset : {0, 1}) {
    SCOPED_TRACE(StrFormat("span [%d, %d)", offset, n));
    const int count = n - offset;
    auto tail = [&](const auto& x) { return Tail(x, offset); };
    std::vector<uint16_t> high = tail(high0), low = tail(low0);
    std::vector<float> m = tail(m0), v = tail(v0), g = tail(grad);
    ASSERT_STATUS_OK(cpu_->AdamW(Tensor(high.data(), DType::kBF16, {count}),
                                 Tensor(low.data(), DType::kU16, {count}), HostView(g, {count}),
                                 HostView(m, {count}), HostView(v, {count}), p));
    DeviceBuffer g_high(gpu_.get(), DType::kBF16, {n}), g_low(gpu_.get(), DType::kU16, {n});
    ASSERT_STATUS_OK(gpu_->CopyToDevice(g_high.tensor().data, high0.data(), n * 2));
    ASSERT_STATUS_OK(gpu_->CopyToDevice(g_low.tensor().data, low0.data(), n * 2));
    auto g_grad = F32(grad, {n}), g_m = F32(m0, {n}), g_v = F32(v0, {n});
    ASSERT_STATUS_OK(
        gpu_->AdamW(g_high.tensor().rows(offset, count), g_low.tensor().rows(offset, count),
                    g_grad->tensor().rows(offset, count), g_m->tensor().rows(offset, count),
                    g_v->tensor().rows(offset, count), p));
    std::vector<uint16_t> got_high(n), got_low(n);
    ASSERT_STATUS_OK(gpu_->CopyToHost(got_high.data(), g_high.tensor().data, n * 2));
    ASSERT_STATUS_OK(gpu_->CopyToHost(got_low.data(), g_low.tensor().data, n * 2));
    std::vector<float> got(count), want(count);
    for (int i = 0; i < count; ++i) {
      got[i] = JoinMaster(got_high[offset + i], got_low[offset + i]);
      want[i] = JoinMaster(high[i], low[i]);
      ASSERT_EQ(got_high[offset + i], MasterHigh(got[i])) << i;
    }
    EXPECT_RELATIVE_ERROR_BELOW(Minus(got, tail(master0)), Minus(want, tail(master0)), 1e-4);
    EXPECT_RELATIVE_ERROR_BELOW(tail(g_m->Download()), m, 1e-6);
    EXPECT_RELATIVE_ERROR_BELOW(tail(g_v->Download()), v, 1e-6);
    if (offset > 0) {  // elements before the span stay as they were
      EXPECT_EQ(got_high[0], high0[0]);
      EXPECT_EQ(got_low[0], low0[0]);
    }
  }
}

TEST_F(CudaVsCpuTest, MasterHalvesSplitAndJoinAsTheCpu) {
  SCOPED_TRACE(Trace());
  const int n = 100003;
  std::vector<float> master(n);
  for (float& w : master) {  // finite bit patterns of every exponent, and ties
    uint32_t u = static_cast<uint32_t>(rng_()) & 0xff7fffffu;
    if (rng_() % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;
    std::memcpy(&w, &u, 4);
  }
  auto g_master = F32(master, {n});
  DeviceBuffer g_high(gpu_.get(), DType::kBF16, {n}), g_low(gpu_.get(), DType::kU16, {n});
  ASSERT_STATUS_OK(gpu_->SplitMasterHalves(g_high.tensor(), g_low.tensor(), g_master->tensor()));
  auto g_joined = F32(std::vector<float>(n), {n});
  ASSERT_STATUS_OK(gpu_->JoinMasterHalves(g_joined->tensor(), g_high.tensor(), g_low.tensor()));
  std::vector<uint16_t> high(n), low(n);
  ASSERT_STATUS_OK(gpu_->CopyToHost(high.data(), g_high.tensor().data, n * 2));
  ASSERT_STATUS_OK(gpu_->CopyToHost(low.data(), g_low.tensor().data, n * 2));
  const std::vector<float> joined = g_joined->Download();
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(high[i], MasterHigh(master[i])) << i;
    ASSERT_EQ(low[i], MasterRemainder(master[i])) << i;
    ASSERT_EQ(std::memcmp(&joined[i], &master[i], 4), 0) << i;
  }
}

TEST_F(CudaVsCpuTest, SumIntoSquaresMatchDoubleLoop) {
  SCOPED_TRACE(Trace());
  DeviceBuffer total(gpu_.get(), DType::kF64, {1});
  ASSERT_STATUS_OK(total.status());
  for (int n : {1, 1000, (1 << 20) + 3}) {
    const std::vector<float> x = RandomFloats(n, rng_);
    double want = 0.0;
    for (float value : x) want += static_cast<double>(value) * value;
    auto g_x = F32(x, {n});
    ASSERT_STATUS_OK(gpu_->SumInto(total.tensor(), g_x->tensor(), SumOf::kSquares, false));
    double got = -1.0;
    ASSERT_STATUS_OK(gpu_->CopyToHost(&got, total.tensor().data, sizeof(double)));
    EXPECT_NEAR(got, want, 1e-12 * want) << "n=" << n;
  }
}

// SumInto keeps a device total: the first call sets it, the next ones add (the step's loss).
TEST_F(CudaVsCpuTest, SumIntoSetsThenAccumulates) {
  SCOPED_TRACE(Trace());
  double want = 0.0;
  DeviceBuffer total(gpu_.get(), DType::kF64, {1});
  ASSERT_STATUS_OK(total.status());
  bool first = true;
  for (int n : {(1 << 20) + 3, 1, 1000}) {
    const std::vector<float> x = RandomFloats(n, rng_);
    const SumOf what = n == 1000 ? SumOf::kSquares : SumOf::kValues;
    for (float value : x)
      want += what == SumOf::kSquares ? static_cast<double>(value) * value : value;
    auto g_x = F32(x, {n});
    ASSERT_STATUS_OK(gpu_->SumInto(total.tensor(), g_x->tensor(), what, !first));
    first = false;
    double got = 0.0;
    ASSERT_STATUS_OK(gpu_->CopyToHost(&got, total.tensor().data, sizeof(double)));
    EXPECT_NEAR(got, want, 1e-9 * (1.0 + std::fabs(want))) << "after n=" << n;
  }
}

}  // namespace
}  // namespace cuda_testing
}  // namespace trainer
