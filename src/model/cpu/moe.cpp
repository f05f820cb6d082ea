// Mixture of experts on the CPU: the router (scores, top-k with the lower expert index winning
// ties, the chosen weights, the shared expert's sigmoid gate, logsumexp for the z-loss) and its
// backward; the row scatter and gather that permute tokens into expert order and combine the
// experts' outputs in a fixed order; the dot products that are the combine weights' gradient;
// and the router's load-balancing and z losses (their values, and the aux loss's coefficients).
// Tokens are independent and split over threads; every sum runs in a fixed order.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "model/cpu/cpu_backend.h"
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {
namespace {

float Sigmoid(float x) {
  return 1.f / (1.f + std::exp(-x));
}

// probs (E) = softmax(z (E)); returns the logsumexp.
float Softmax(float* probs, const float* z, int E) {
  float max = z[0];
  for (int e = 1; e < E; ++e) max = std::fmax(max, z[e]);
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(z[e] - max));
  const float lse = max + static_cast<float>(std::log(sum));
  for (int e = 0; e < E; ++e) probs[e] = std::exp(z[e] - lse);
  return lse;
}

// The K largest of key (E) into chosen (K), ascending by index; equal keys: the lower index;
// NaN as -infinity (a total order: K distinct experts whatever the scores). taken (E) is scratch.
void TopK(int32_t* chosen, char* taken, const float* key, int E, int K) {
  const auto at = [key](int e) { return std::isnan(key[e]) ? -INFINITY : key[e]; };
  for (int e = 0; e < E; ++e) taken[e] = 0;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!taken[e] && (best < 0 || at(e) > at(best))) best = e;
    taken[best] = 1;
    chosen[k] = best;
  }
  for (int i = 1; i < K; ++i)  // insertion sort: K is small
    for (int j = i; j > 0 && chosen[j - 1] > chosen[j]; --j) std::swap(chosen[j - 1], chosen[j]);
}

}  // namespace

void moe_router_forward(float* weights, int32_t* experts, float* probs, float* lse,
                        const float* logits, const float* bias, const MoeRouterShape& s) {
  const int E = s.E, K = s.K, E2 = s.E2(), K2 = s.K2();
#pragma omp parallel
  {
  std::vector<float> scratch(E), key(E);
  std::vector<char> taken(E);
#pragma omp for schedule(static)
  for (int64_t t = 0; t < s.N; ++t) {
    const float* z = logits + t * E2;
    float* p = probs + t * E;
    float* w = weights + t * K2;
    int32_t* chosen = experts + t * K;
    lse[t] = Softmax(s.sigmoid ? scratch.data() : p, z, E);
    if (s.sigmoid)
      for (int e = 0; e < E; ++e) p[e] = Sigmoid(z[e]);
    const bool by_logits = !s.sigmoid && !s.pre_softmax;
    const float* by = by_logits ? z : p;
    if (bias != nullptr) {  // the bias moves the choice, not the weights
      for (int e = 0; e < E; ++e) key[e] = by[e] + bias[e];
      by = key.data();
    }
    TopK(chosen, taken.data(), by, E, K);
    if (by_logits) {  // softmax over the chosen logits (Mixtral)
      float max = z[chosen[0]];
      for (int k = 1; k < K; ++k) max = std::fmax(max, z[chosen[k]]);
      float sum = 0.f;
      for (int k = 0; k < K; ++k) sum += (w[k] = std::exp(z[chosen[k]] - max));
      for (int k = 0; k < K; ++k) w[k] /= sum;
    } else {
      float sum = 0.f;
      for (int k = 0; k < K; ++k) sum += (w[k] = p[chosen[k]]);
      if (s.norm_topk_prob)
        for (int k = 0; k < K; ++k) w[k] /= sum;
    }
    if (s.shared_gate) w[K] = Sigmoid(z[E]);
  }
  }
}

void moe_router_backward(float* dlogits, const float* dweights, const float* logits,
                         const float* probs, const int32_t* experts, const float* weights,
                         const float* aux_coef, int64_t groups, float z_scale,
                         const MoeRouterShape& s) {
  const int E = s.E, K = s.K, E2 = s.E2(), K2 = s.K2();
  const int64_t rows_per_group = groups > 0 ? s.N / groups : s.N;
#pragma omp parallel
  {
  std::vector<float> dp(E), softmax(E);
#pragma omp for schedule(static)
  for (int64_t t = 0; t < s.N; ++t) {
    const float* z = logits + t * E2;
    const float* p = probs + t * E;
    const float* w = weights + t * K2;
    const float* dw = dweights + t * K2;
    const int32_t* chosen = experts + t * K;
    float* dz = dlogits + t * E2;
    for (int e = 0; e < E; ++e) dz[e] = dp[e] = 0.f;
    // Through the weights: w_k = p_k / S (S = the sum of the chosen, or 1), so
    // dp_k = (dw_k - [sum_j dw_j w_j]) / S; Mixtral's softmax over the chosen logits likewise.
    float dot = 0.f, chosen_sum = 0.f;
    for (int k = 0; k < K; ++k) {
      dot += dw[k] * w[k];
      chosen_sum += p[chosen[k]];
    }
    if (!s.sigmoid && !s.pre_softmax) {
      for (int k = 0; k < K; ++k) dz[chosen[k]] += w[k] * (dw[k] - dot);
    } else {
      const float S = s.norm_topk_prob ? chosen_sum : 1.f;
      for (int k = 0; k < K; ++k) dp[chosen[k]] += (dw[k] - (s.norm_topk_prob ? dot : 0.f)) / S;
    }
    // The load-balancing loss, through the scores (sigmoid: normalised to sum 1 first).
    if (aux_coef != nullptr) {
      const float* a = aux_coef + (t / rows_per_group) * E;
      if (!s.sigmoid) {
        for (int e = 0; e < E; ++e) dp[e] += a[e];
      } else {
        float total = 0.f, weighted = 0.f;
        for (int e = 0; e < E; ++e) total += p[e];
        for (int e = 0; e < E; ++e) weighted += a[e] * p[e] / total;
        for (int e = 0; e < E; ++e) dp[e] += (a[e] - weighted) / total;
      }
    }
    if (!s.sigmoid) {  // softmax: dz = p (dp - sum dp p)
      float sum = 0.f;
      for (int e = 0; e < E; ++e) sum += dp[e] * p[e];
      for (int e = 0; e < E; ++e) dz[e] += p[e] * (dp[e] - sum);
    } else {
      for (int e = 0; e < E; ++e) dz[e] += dp[e] * p[e] * (1.f - p[e]);
    }
    // The z-loss z_scale * lse^2: dz = z_scale * 2 lse softmax(z).
    if (z_scale != 0.f) {
      const float lse = Softmax(softmax.data(), z, E);
      for (int e = 0; e < E; ++e) dz[e] += z_scale * 2.f * lse * softmax[e];
    }
    if (s.shared_gate) dz[E] = dw[K] * w[K] * (1.f - w[K]);
  }
  }
}

void moe_router_losses(float* aux_coef, double* losses, const int32_t* experts, const float* probs,
                       const float* lse, const MoeLossShape& s, double aux, double z,
                       float loss_scale) {
  const int E = s.E, K = s.K;
  const int64_t N = s.N, G = s.G, n = N / G;
  // Per group g: coef (g,e) = loss_scale * c * count_e / G, the loss adds c * P_e * count_e / G.
  double aux_loss = 0;
  if (aux_coef != nullptr) {
    const double c = aux * E / (static_cast<double>(K) * n * n);
    std::vector<double> count(E), score(E);
    for (int64_t g = 0; g < G; ++g) {
      std::fill(count.begin(), count.end(), 0.0);
      std::fill(score.begin(), score.end(), 0.0);
      for (int64_t t = g * n; t < (g + 1) * n; ++t) {
        for (int k = 0; k < K; ++k) count[experts[t * K + k]] += 1;
        double total = 1;
        if (s.sigmoid) {
          total = 0;
          for (int e = 0; e < E; ++e) total += probs[t * E + e];
        }
        for (int e = 0; e < E; ++e) score[e] += probs[t * E + e] / total;
      }
      for (int e = 0; e < E; ++e) {
        aux_loss += c * score[e] * count[e] / G;
        aux_coef[g * E + e] = static_cast<float>(loss_scale * c * count[e] / G);
      }
    }
  }
  double z_loss = 0;
  if (z > 0) {
    for (int64_t t = 0; t < N; ++t) z_loss += static_cast<double>(lse[t]) * lse[t];
    z_loss *= z / N;
  }
  losses[0] = aux_loss;
  losses[1] = z_loss;
}

void moe_scatter_rows(float* out, const float* in, const int32_t* slots, const float* w,
                      int64_t N, int K2, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t)
    for (int k = 0; k < K2; ++k) {
      const int32_t slot = slots[t * K2 + k];
      if (slot < 0) continue;
      const float scale = w ? w[t * K2 + k] : 1.f;
      float* dst = out + slot * C;
      const float* src = in + t * C;
      for (int64_t c = 0; c < C; ++c) dst[c] = scale * src[c];
    }
}

void moe_gather_rows(float* out, const float* in, const int32_t* slots, const float* w,
                     int64_t N, int K2, int64_t C, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    float* dst = out + t * C;
    if (!accumulate)
      for (int64_t c = 0; c < C; ++c) dst[c] = 0.f;
    for (int k = 0; k < K2; ++k) {
      const int32_t slot = slots[t * K2 + k];
      if (slot < 0) continue;
      const float scale = w ? w[t * K2 + k] : 1.f;
      const float* src = in + slot * C;
      for (int64_t c = 0; c < C; ++c) dst[c] += scale * src[c];
    }
  }
}

void moe_dispatch_slots(int32_t* slots, int32_t* counts, const int32_t* experts, int64_t N, int K,
                        int K2, int E, int64_t capacity) {
  for (int e = 0; e < E; ++e) counts[e] = 0;
  const auto valid = [E](int e) { return e >= 0 && e < E; };  // else no expert: dropped
  for (int64_t i = 0; i < N * K; ++i)
    if (valid(experts[i])) ++counts[experts[i]];
  // Each expert's group: its start (the kept rows of the experts before it) and end.
  std::vector<int64_t> next(E), end(E);
  int64_t start = 0;
  for (int e = 0; e < E; ++e) {
    next[e] = start;
    start += capacity > 0 ? std::min<int64_t>(counts[e], capacity) : counts[e];
    end[e] = start;
  }
  for (int64_t t = 0; t < N; ++t) {  // token order within each group; past its end, dropped
    for (int k = 0; k < K; ++k) {
      const int e = experts[t * K + k];
      slots[t * K2 + k] = valid(e) && next[e] < end[e] ? static_cast<int32_t>(next[e]++) : -1;
    }
    if (K2 > K) slots[t * K2 + K] = static_cast<int32_t>(N * K + t);
  }
}

void moe_slot_dots(float* dw, const float* dout, const float* in, const int32_t* slots, int64_t N,
                   int K2, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t)
    for (int k = 0; k < K2; ++k) {
      const int32_t slot = slots[t * K2 + k];
      float sum = 0.f;
      if (slot >= 0)
        for (int64_t c = 0; c < C; ++c) sum += dout[t * C + c] * in[slot * C + c];
      dw[t * K2 + k] = sum;
    }
}

}  // namespace cpu

namespace {
cpu::MoeRouterShape RouterShape(Tensor logits, const MoeRouting& r) {
  const int E = static_cast<int>(Cols(logits)) - (r.shared_gate ? 1 : 0);
  return {Rows(logits), E, r.top_k, r.sigmoid, r.pre_softmax, r.norm_topk_prob, r.shared_gate};
}
int SlotsPerRow(Tensor slots, Tensor rows) {
  return static_cast<int>(slots.numel() / Rows(rows));
}
}  // namespace

Status CpuBackend::RunMoeRouterForward(Tensor weights, Tensor experts, Tensor probs, Tensor lse,
                                       Tensor logits, Tensor bias, const MoeRouting& r) {
  cpu::moe_router_forward(weights.as<float>(), experts.as<int32_t>(), probs.as<float>(),
                          lse.as<float>(), logits.as<float>(),
                          bias.empty() ? nullptr : bias.as<float>(), RouterShape(logits, r));
  return Status::Ok();
}

Status CpuBackend::RunMoeRouterBackward(Tensor dlogits, Tensor dweights, Tensor logits,
                                        Tensor probs, Tensor experts, Tensor weights,
                                        Tensor aux_coef, float z_scale, const MoeRouting& r) {
  cpu::moe_router_backward(dlogits.as<float>(), dweights.as<float>(), logits.as<float>(),
                           probs.as<float>(), experts.as<int32_t>(), weights.as<float>(),
                           aux_coef.empty() ? nullptr : aux_coef.as<float>(),
                           aux_coef.empty() ? 0 : Rows(aux_coef), z_scale,
                           RouterShape(logits, r));
  return Status::Ok();
}

Status CpuBackend::RunMoeRouterLosses(Tensor aux_coef, Tensor losses, Tensor experts,
                                      Tensor probs, Tensor lse, const MoeLossCoefficients& c) {
  const cpu::MoeLossShape shape{Rows(probs), aux_coef.empty() ? 1 : Rows(aux_coef),
                                static_cast<int>(Cols(probs)),
                                static_cast<int>(experts.numel() / Rows(probs)), c.sigmoid};
  cpu::moe_router_losses(aux_coef.empty() ? nullptr : aux_coef.as<float>(), losses.as<double>(),
                         experts.as<int32_t>(), probs.as<float>(), lse.as<float>(), shape, c.aux,
                         c.z, c.loss_scale);
  return Status::Ok();
}

Status CpuBackend::RunMoeDispatchSlots(Tensor slots, Tensor counts, Tensor experts,
                                      int64_t capacity) {
  cpu::moe_dispatch_slots(slots.as<int32_t>(), counts.as<int32_t>(), experts.as<int32_t>(),
                          Rows(experts), static_cast<int>(Cols(experts)),
                          static_cast<int>(Cols(slots)), static_cast<int>(counts.numel()),
                          capacity);
  return Status::Ok();
}

Status CpuBackend::RunMoeScatterRows(Tensor out, Tensor in, Tensor slots, Tensor weights) {
  cpu::moe_scatter_rows(out.as<float>(), in.as<float>(), slots.as<int32_t>(),
                        weights.empty() ? nullptr : weights.as<float>(), Rows(in),
                        SlotsPerRow(slots, in), Cols(in));
  return Status::Ok();
}

Status CpuBackend::RunMoeGatherRows(Tensor out, Tensor in, Tensor slots, Tensor weights,
                                    bool accumulate) {
  cpu::moe_gather_rows(out.as<float>(), in.as<float>(), slots.as<int32_t>(),
                       weights.empty() ? nullptr : weights.as<float>(), Rows(out),
                       SlotsPerRow(slots, out), Cols(out), accumulate);
  return Status::Ok();
}

Status CpuBackend::RunMoeSlotDots(Tensor dweights, Tensor dout, Tensor in, Tensor slots) {
  cpu::moe_slot_dots(dweights.as<float>(), dout.as<float>(), in.as<float>(), slots.as<int32_t>(),
                     Rows(dout), SlotsPerRow(slots, dout), Cols(dout));
  return Status::Ok();
}

}  // namespace trainer
