// The MoE experts' grouped GEMMs as Hopper kernels of our own (sm90/grouped_gemm_sm90.cu): every
// row group of a call in one persistent launch, with the tiles of sm90/gemm_tiles.cuh.
//   forward:          out[R_g] (rows_g, OC) = in[R_g] (rows_g, C) @ W_e (OC, C)^T
//   input gradient:   din[R_g] (rows_g, C) = dout[R_g] (rows_g, OC) @ W_e (OC, C)
//   weight gradient:  dW_e (OC, C) f32 (+)= sum over e's groups g of dout[R_g]^T @ in[R_g]
//   forward + SwiGLU: the forward, and act[R_g] (rows_g, OC / 2) = SwiGLU of its output
// R_g = rows [offset_g, offset_g + rows_g) of the row-side tensors (packed by expert, any sizes),
// W_e = expert e's matrix of the stacked weights (E, OC, C). bf16 operands and outputs, f32
// accumulation. Rows in no group are left as they were. Its CPU twin is the CPU backend's
// per-group loop (Backend::RunGroupedMatmulForward/Backward, RunGroupedMatmulSwiGluForward); the
// GPU backend takes it where the route says so (cuda_backend_grouped.cpp).
//
// The output is tiled in 128-row blocks of each group (GroupedBlock, built on the host from the
// group sizes and copied to the device in the launch's stream) by 256 columns. A group's last
// block reads rows past the group (the next group's, or the TMA's zeros past the tensor's end) and
// stores only the group's rows. The weight gradient's tiles are (expert, 128 rows of OC, 256 of C),
// each summing the expert's groups' rows in k-blocks of 64 rows; the rows of a group's last k-block
// past the group are zeroed in shared memory before they are multiplied.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace trainer {
namespace cuda {

// One 128-row block of a group: rows [row, min(row + 128, end)) with expert `expert`'s weights.
struct GroupedBlock {
  int32_t row = 0, end = 0, expert = 0, unused = 0;
};
constexpr int64_t kGroupedBlockRows = 128;

// Appends the blocks of one group (rows [offset, offset + rows) of `expert`; none for rows 0).
inline void AppendGroupedBlocks(int64_t expert, int64_t offset, int64_t rows,
                                std::vector<GroupedBlock>* blocks) {
  for (int64_t r = 0; r < rows; r += kGroupedBlockRows)
    blocks->push_back({static_cast<int32_t>(offset + r), static_cast<int32_t>(offset + rows),
                       static_cast<int32_t>(expert), 0});
}

// kForwardSwiGlu: the forward of a [gate | up] weight (OC = 2F: rows 0..F-1 of each expert's
// matrix the gate's, F..2F-1 the up's) that also writes act[R_g] (rows_g, F) = silu(gate) * up
// of the bf16 outputs, as SwiGluForward computes it from them.
enum class GroupedSm90Op { kForward, kInputGradient, kForwardSwiGlu };

struct GroupedSm90Problem {
  GroupedSm90Op op = GroupedSm90Op::kForward;
  const void* rows_in = nullptr;  // forward: in (M, C); input gradient: dout (M, OC)
  const void* weights = nullptr;  // (E, OC, C)
  void* rows_out = nullptr;       // forward: out (M, OC); input gradient: din (M, C)
  int64_t m = 0;                  // rows of the row-side tensors (groups and rows in none)
  int64_t experts = 0, oc = 0, c = 0;
  // The blocks (AppendGroupedBlocks over the groups), in device memory, written in the launch's
  // stream before it; block_count of them. Each block's rows lie in [0, m).
  const GroupedBlock* blocks = nullptr;
  int64_t block_count = 0;
  void* act = nullptr;  // kForwardSwiGlu: (M, OC / 2)
};

// The weight gradient's problem. Its lists (MakeGroupedExperts) in device memory, written in the
// launch's stream before it.
struct GroupedExpert {
  int32_t expert = 0, first_run = 0, runs = 0, unused = 0;  // runs[first_run .. + runs)
};
struct GroupedSm90WeightGradient {
  const void* dout = nullptr;  // (M, OC) bf16
  const void* in = nullptr;    // (M, C) bf16
  void* dweights = nullptr;    // (E, OC, C) f32
  bool accumulate = false;     // dW_e += the sum (else =), for each expert with rows
  int64_t m = 0, experts = 0, oc = 0, c = 0;
  const GroupedExpert* expert_list = nullptr;  // the experts with rows
  int64_t expert_count = 0;
  const GroupedBlock* runs = nullptr;  // their groups (row, end, expert), expert by expert
  // Where given (not accumulating): GroupedSm90WeightGradientSquares() doubles whose sum is the
  // sum of the squares of the f32 dW the launch writes (each warp's share of a tile, as stored);
  // the experts it does not write add nothing.
  double* tile_squares = nullptr;
};
constexpr int kSquaresPerTile = 8;  // one per multiplying warp

// The weight gradient's lists from the groups (each with expert, offset and rows; rows 0 skipped):
// each expert's groups in their order as runs, expert by expert, and one entry per expert with
// rows.
template <typename Group>
inline void MakeGroupedExperts(const std::vector<Group>& groups, int64_t experts,
                               std::vector<GroupedBlock>* runs, std::vector<GroupedExpert>* list) {
  runs->clear();
  list->clear();
  for (int64_t e = 0; e < experts; ++e) {
    const size_t first = runs->size();
    for (const Group& g : groups)
      if (g.expert == e && g.rows > 0)
        runs->push_back({static_cast<int32_t>(g.offset), static_cast<int32_t>(g.offset + g.rows),
                         static_cast<int32_t>(e), 0});
    if (runs->size() > first)
      list->push_back({static_cast<int32_t>(e), static_cast<int32_t>(first),
                       static_cast<int32_t>(runs->size() - first), 0});
  }
}

// Whether the kernel runs this problem on the current device: an sm_90 GPU, C and OC multiples of
// 256, m and E * OC below 2^31, 16-byte aligned pointers (act too, for kForwardSwiGlu).
bool GroupedSm90Supported(const GroupedSm90Problem& problem);

// Enqueues the kernel (one CTA per SM at most; nothing for block_count 0). Returns
// cudaErrorNotSupported for a problem that GroupedSm90Supported refuses.
cudaError_t LaunchGroupedSm90(const GroupedSm90Problem& problem, cudaStream_t stream);

// The number of tile_squares a weight gradient's launch writes (its expert list set).
int64_t GroupedSm90WeightGradientSquares(const GroupedSm90WeightGradient& problem);
// The same for the weight gradient (nothing to launch for expert_count 0).
bool GroupedSm90WeightGradientSupported(const GroupedSm90WeightGradient& problem);
cudaError_t LaunchGroupedSm90WeightGradient(const GroupedSm90WeightGradient& problem,
                                            cudaStream_t stream);

}  // namespace cuda
}  // namespace trainer
