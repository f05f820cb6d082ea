// Vocabulary-parallel softmax cross-entropy in three passes (row max, exp sums and target logit,
// then losses and logit gradients), with all-reduces between them done by the caller; padding
// columns (global index >= vocab_size) are masked out. Kernels and the CpuBackend CrossEntropy*
// ops. Rows are independent and split over threads.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/log.h"
#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"
#include "model/cpu/simd.h"

namespace trainer {
namespace cpu {
namespace {

// Local columns [0, real) are real vocabulary entries; the rest are padding.
inline int RealColumns(int V, int vocab_start, int vocab_size) {
  return std::clamp(vocab_size - vocab_start, 0, V);
}

// sum_j exp(x[j] - m) over n columns, in double.
TRAINER_CPU_CLONES
double SumExp(const float* x, float m, int n) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) sum += SimdExp(x[j] - m);
  return sum;
}

// d[j] = scale * exp(x[j] - m) * inv_sum over n columns (d may be x).
TRAINER_CPU_CLONES
void ScaledSoftmax(float* d, const float* x, float m, float inv_sum, float scale, int n) {
#pragma omp simd
  for (int j = 0; j < n; ++j) d[j] = scale * (SimdExp(x[j] - m) * inv_sum);
}

}  // namespace

void crossentropy_row_max(float* row_max, const float* logits, int64_t N, int V, int vocab_start,
                          int vocab_size) {
  const int real = RealColumns(V, vocab_start, vocab_size);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < real; ++j) m = std::max(m, x[j]);
    row_max[n] = m;
  }
}

void crossentropy_sums(float* sums, const float* logits, const float* row_max,
                       const int32_t* targets, int64_t N, int V, int vocab_start, int vocab_size) {
  const int real = RealColumns(V, vocab_start, vocab_size);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    // A rank without real columns adds nothing (and never forms inf - inf).
    const double sum = real > 0 ? SumExp(x, row_max[n], real) : 0.0;
    const int64_t target = static_cast<int64_t>(targets[n]) - vocab_start;
    sums[n] = static_cast<float>(sum);
    sums[N + n] = (target >= 0 && target < real) ? x[target] : 0.f;
  }
}

void crossentropy_backward(float* losses, float* dlogits, const float* logits, const float* row_max,
                           const float* sums, const int32_t* targets, int64_t N, int V,
                           int vocab_start, int vocab_size, float dloss_scale) {
  const int real = RealColumns(V, vocab_start, vocab_size);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) {  // an ignored target (loss mask 0): no loss, no gradient
      losses[n] = 0.f;
      if (dlogits != nullptr) std::fill(dlogits + n * V, dlogits + (n + 1) * V, 0.f);
      continue;
    }
    const float m = row_max[n], sum = sums[n];
    losses[n] = std::log(sum) + m - sums[N + n];
    if (dlogits == nullptr) continue;
    const float* x = logits + n * V;
    float* d = dlogits + n * V;  // may be x
    const float inv_sum = 1.f / sum;
    const int64_t target = static_cast<int64_t>(targets[n]) - vocab_start;
    const bool local_target = target >= 0 && target < real;
    // The target's probability, read before d overwrites x; same arithmetic as ScaledSoftmax.
    const float target_prob = local_target ? SimdExp(x[target] - m) * inv_sum : 0.f;
    ScaledSoftmax(d, x, m, inv_sum, dloss_scale, real);
    if (local_target) d[target] = dloss_scale * (target_prob - 1.f);
    std::fill(d + real, d + V, 0.f);
  }
}

}  // namespace cpu

Status CpuBackend::RunCrossEntropyRowMax(Tensor row_max, Tensor logits, int vocab_start,
                                         int vocab_size) {
  cpu::crossentropy_row_max(row_max.as<float>(), logits.as<float>(), Rows(logits),
                            static_cast<int>(Cols(logits)), vocab_start, vocab_size);
  return Status::Ok();
}

Status CpuBackend::RunCrossEntropySums(Tensor sums, Tensor logits, Tensor row_max, Tensor targets,
                                       int vocab_start, int vocab_size) {
  cpu::crossentropy_sums(sums.as<float>(), logits.as<float>(), row_max.as<float>(),
                         targets.as<int32_t>(), Rows(logits), static_cast<int>(Cols(logits)),
                         vocab_start, vocab_size);
  return Status::Ok();
}

Status CpuBackend::RunCrossEntropyBackward(Tensor losses, Tensor dlogits, Tensor logits,
                                           Tensor row_max, Tensor sums, Tensor targets,
                                           int vocab_start, int vocab_size, float dloss_scale) {
  cpu::crossentropy_backward(losses.as<float>(), dlogits.empty() ? nullptr : dlogits.as<float>(),
                             logits.as<float>(), row_max.as<float>(), sums.as<float>(),
                             targets.as<int32_t>(), Rows(logits), static_cast<int>(Cols(logits)),
                             vocab_start, vocab_size, dloss_scale);
  return Status::Ok();
}

}  // namespace trainer
