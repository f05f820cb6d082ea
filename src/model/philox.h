// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
// generator of Random123, cuRAND and PyTorch's CUDA dropout) and the dropout masks drawn from it.
// One header for host and device: the CPU kernels, the CUDA kernels and the tests compute the same
// bits from the same key, so a mask is never stored (each kernel draws it again where it needs
// it) and the GPU's masks equal the CPU's exactly.
//
// A mask element is a pure function of where it is, never of which rank or thread draws it:
//   key     = (seed_lo ^ seed_hi, kind | (layer + 1) << 2 | head << 16)
//   counter = (column / 4, position, sample, step)
// and the element keeps its value when word (column % 4) of Philox(counter, key) is >= p * 2^32
// (kept values are scaled by 1 / (1 - p)). `sample` is the row's index in the step's global batch
// (the same whatever the DP/PP layout and micro-batch split), `position` its GLOBAL position in
// the sequence (the same under sequence parallelism), `column` the hidden channel, or the key
// position for attention probabilities (whose `position` is the query's and `head` the GLOBAL
// head index, the same under tensor parallelism). A tensor whose columns are a block of a wider
// one (a row-parallel LoRA adapter's input under TP) draws by the global column
// (DropoutKey::first_column). LoRA's masks (kind kDropoutLora + the adapter's slot) are keyed
// with kind bits 0 and head = slot + 1: the hidden-state masks (kinds 0-2) always have head 0 and
// the attention probabilities kind 3, so no LoRA mask equals one of theirs, and theirs are the
// same as before LoRA had dropout.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TRAINER_HD __host__ __device__ __forceinline__
#else
#define TRAINER_HD inline
#endif

namespace trainer {

struct Philox4 {
  uint32_t v[4];
};

TRAINER_HD Philox4 Philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                 uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Where dropout is applied; part of the key.
enum DropoutKind : uint32_t {
  kDropoutEmbedding = 0,  // the embeddings' sum (layer -1)
  kDropoutAttnOut = 1,    // after the attention output projection
  kDropoutMlpOut = 2,     // after the MLP output projection
  kDropoutAttnProbs = 3,  // the attention probabilities
  kDropoutLora = 4,       // + LoraSlot (lora.h): the input of the block's adapter in that slot
};

// Everything but the element's coordinates: one dropout site of one micro-batch in one step.
// p == 0 means off (no kernel runs).
struct DropoutKey {
  float p = 0.f;
  uint64_t seed = 0;
  uint32_t step = 0;
  int64_t first_sample = 0;  // the global-batch index of the tensor's first sample
  int seq_len = 1;           // T: the tensor's row r is sample r / T, position r % T
  int64_t first_row = 0;     // the global row (of B*T) of the tensor's row 0 (sequence parallel)
  int layer = -1;
  uint32_t kind = kDropoutEmbedding;
  int first_head = 0;  // attention: the global index of this rank's head 0
  int64_t first_column = 0;  // hidden-state kinds: the global column of the tensor's column 0
  bool on() const { return p > 0.f; }
};

// Elements are kept when their word is >= this.
TRAINER_HD uint32_t DropoutThreshold(float p) {
  const double t = static_cast<double>(p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}

// What a kept element is multiplied by.
TRAINER_HD float DropoutScale(float p) {
  return 1.f / (1.f - p);
}

TRAINER_HD uint32_t DropoutKey1(uint32_t kind, int layer, int head) {
  if (kind >= kDropoutLora) {  // kind bits 0, head = slot + 1 (see the top of this file)
    head = static_cast<int>(kind - kDropoutLora) + 1;
    kind = 0;
  }
  return kind | (static_cast<uint32_t>(layer + 1) << 2) | (static_cast<uint32_t>(head) << 16);
}

// The four mask words of columns [4 * group, 4 * group + 4) at (sample, position) of head `head`.
TRAINER_HD Philox4 DropoutWords(uint64_t seed, uint32_t step, uint32_t kind, int layer, int head,
                                int64_t sample, int64_t position, int64_t group) {
  return Philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(position),
                       static_cast<uint32_t>(sample), step,
                       static_cast<uint32_t>(seed) ^ static_cast<uint32_t>(seed >> 32),
                       DropoutKey1(kind, layer, head));
}

// The four mask words of a row of a hidden-state tensor (head 0) at columns [4 group, 4 group + 4):
// global row `row` of the key's micro-batch.
TRAINER_HD Philox4 HiddenDropoutWords(const DropoutKey& k, int64_t row, int64_t group) {
  const int64_t global = k.first_row + row;
  return DropoutWords(k.seed, k.step, k.kind, k.layer, 0, k.first_sample + global / k.seq_len,
                      global % k.seq_len, group);
}

}  // namespace trainer
