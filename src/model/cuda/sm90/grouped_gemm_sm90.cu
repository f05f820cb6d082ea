// The MoE experts' grouped GEMMs on Hopper (sm_90a; grouped_gemm_sm90.h): every group's 128 x 256
// output tiles in one persistent launch. The mainloop is gemm_tiles.cuh's (a TMA thread feeding
// the stage ring, two multiplying warpgroups): a tile of block i (GroupedBlock) reads rows
// blocks[i].row .. + 127 of the row-side operand and the block's expert's rows of the stacked
// weights, (E * OC, C) as one matrix: K-major B rows e OC + n0 .. for the forward, N-major B
// k-blocks from row e OC for the input gradient. The rows past the group in a group's last block
// are multiplied like the others (the next group's rows, or the TMA's zeros past the tensor) and
// never stored. The multipliers write the tile (bf16) into the output tile in shared memory and go
// on to the next tile; the loading warpgroup's spare warps store the block's rows of it to global
// memory, 16 bytes a thread and a row a warp at a time, and hand the buffer back.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "model/cuda/sm90/gemm_tiles.cuh"
#include "model/cuda/sm90/grouped_gemm_sm90.h"

namespace trainer {
namespace cuda {
namespace {

using namespace sm90;

constexpr int kSharedBytes = KernelSharedBytes(0);

// The first `rows` rows of the output tile (bf16, four swizzled boxes of (128, 64)) to rows
// row0 .. row0 + rows - 1, columns n0 .. n0 + 255 of `out` (row-major, `cols` columns), by
// `threads` threads (thread: this one's index among them). Chunk c is row c / 32, 16-byte chunk
// c % 32 of it: box c % 32 / 8, at (c % 8) ^ (row % 8) in the box's row (the TMA's 128B swizzle).
__device__ __forceinline__ void StoreTileRows(const uint8_t* out_tile, uint8_t* out, int64_t cols,
                                              int64_t row0, int n0, int rows, int thread,
                                              int threads) {
  for (int c = thread; c < rows * 32; c += threads) {
    const int r = c / 32, chunk = c % 32;
    const uint4 v = *reinterpret_cast<const uint4*>(out_tile + chunk / 8 * kBoxBytes + r * 128 +
                                                    ((chunk % 8) ^ (r % 8)) * 16);
    *reinterpret_cast<uint4*>(out + ((row0 + r) * cols + n0 + chunk * 8) * 2) = v;
  }
}

// The tile of `t` in the tile order: its block and first column.
__device__ __forceinline__ GroupedBlock TileBlock(const TileOrder& order,
                                                  const GroupedBlock* blocks, int t, int* n0) {
  int m0;
  order.Coordinates(t, 0, &m0, n0);
  const int4 b = __ldg(reinterpret_cast<const int4*>(blocks) + m0 / kBlockM);
  GroupedBlock block;
  block.row = b.x, block.end = b.y, block.expert = b.z;
  return block;
}

// kB: the weights' layout as B (K-major for the forward, N-major for the input gradient);
// expert_rows: OC, the rows of one expert's matrix; out_cols: N.
template <BMajor kB>
__global__ void __launch_bounds__(kThreads, 1)
    GroupedGemmKernel(const __grid_constant__ CUtensorMap a_map,
                      const __grid_constant__ CUtensorMap b_map, const GroupedBlock* blocks,
                      uint8_t* out, TileOrder order, int k_blocks, int expert_rows,
                      int64_t out_cols) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t shared_raw[];
  const TileShared s = CarveTileShared(shared_raw);
  uint64_t* tile_written = s.own_barriers;  // the multipliers have written the output tile
  uint64_t* tile_free = tile_written + 1;   // the spare warps have stored it

  const int warpgroup = threadIdx.x / 128;
  const int tiles = order.groups();
  if (threadIdx.x == 0) {
    InitRing(s, &a_map, &b_map, nullptr, nullptr, 1);
    BarrierInit(tile_written, 256);
    BarrierInit(tile_free, 1);
    BarrierInitFence();
  }
  __syncthreads();

  if (warpgroup == 0) RegistersDecrease<kLoaderRegisters>();  // by the whole warpgroup
  if (warpgroup == 0 && threadIdx.x >= 32) {  // warps 1-3: the block's rows of the tile to out
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int n0;
      const GroupedBlock block = TileBlock(order, blocks, t, &n0);
      const int rows = min(kBlockM, block.end - block.row);
      BarrierWait(tile_written, phase);
      phase ^= 1;
      StoreTileRows(s.out_tile, out, out_cols, block.row, n0, rows, threadIdx.x - 32,
                    kSpareThreads);
      NamedBarrierSync(2, kSpareThreads);  // every spare thread has read its part of the tile
      if (threadIdx.x == 32) BarrierArrive(tile_free);
    }
  } else if (warpgroup == 0) {  // the loader
    if (threadIdx.x == 0) {
      RingPosition ring;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int n0;
        const GroupedBlock block = TileBlock(order, blocks, t, &n0);
        const int expert_row = block.expert * expert_rows;
        if (kB == BMajor::kK)  // B rows: the expert's output features n0 ..
          LoadTile<BMajor::kK>(s, &a_map, &b_map, block.row, expert_row + n0, k_blocks, &ring);
        else  // B k-blocks: the expert's rows (its output features) from expert_row on
          LoadTile<BMajor::kN>(s, &a_map, &b_map, block.row, n0, k_blocks, &ring, 0, nullptr,
                               nullptr, 0, expert_row);
      }
    }
  } else {  // the multipliers: warpgroup 1 takes the tile's rows 0-63, warpgroup 2 rows 64-127
    RegistersIncrease<kMultiplierRegisters>();
    RingPosition ring;
    float acc[128];
    for (int t = blockIdx.x, i = 0; t < tiles; t += gridDim.x, ++i) {
      MultiplyTile<kB>(acc, s, warpgroup - 1, k_blocks, &ring);
      BarrierWait(tile_free, (i & 1) ^ 1);  // the last tile has been stored (none: at once)
      const int half = warpgroup - 1;
#pragma unroll
      for (int j = 0; j < 32; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<__nv_bfloat162*>(PairInTile(s.out_tile, half, j, h)) =
              __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      BarrierArrive(tile_written);
    }
  }
#endif
}

// The problem's GEMM: A (m, k) the row-side input, B the weights, the output n columns wide.
struct GroupedShape {
  int64_t k, n;
  BMajor b_major;
};
GroupedShape ShapeOf(const GroupedSm90Problem& p) {
  if (p.op == GroupedSm90Op::kForward) return {p.c, p.oc, BMajor::kK};
  return {p.oc, p.c, BMajor::kN};
}

}  // namespace

bool GroupedSm90Supported(const GroupedSm90Problem& p) {
  constexpr int64_t kIntLimit = int64_t{1} << 31;
  return CurrentDevice().sm90 && EncodeTiled() != nullptr && p.m > 0 && p.m < kIntLimit &&
         p.experts > 0 && p.oc > 0 && p.c > 0 && p.oc % kBlockN == 0 && p.c % kBlockN == 0 &&
         p.experts * p.oc < kIntLimit && p.c < kIntLimit && p.block_count >= 0 &&
         p.block_count * kBlockM < kIntLimit && (p.block_count == 0 || p.blocks != nullptr) &&
         Aligned16(p.rows_in) && Aligned16(p.weights) && Aligned16(p.rows_out) &&
         Aligned16(p.blocks);
}

cudaError_t LaunchGroupedSm90(const GroupedSm90Problem& p, cudaStream_t stream) {
  if (!GroupedSm90Supported(p)) return cudaErrorNotSupported;
  if (p.block_count == 0) return cudaSuccess;
  const GroupedShape shape = ShapeOf(p);
  CUtensorMap a_map, b_map;
  const bool b_made = shape.b_major == BMajor::kK
                          ? MakeTileMap(&b_map, p.weights, p.experts * p.oc, p.c, kBlockN)
                          : MakeTileMap(&b_map, p.weights, p.experts * p.oc, p.c, kBlockK);
  if (!MakeTileMap(&a_map, p.rows_in, p.m, shape.k, kBlockM) || !b_made)
    return cudaErrorInvalidValue;
  const TileOrder order{static_cast<int>(p.block_count), static_cast<int>(shape.n / kBlockN), 1};
  auto* kernel =
      shape.b_major == BMajor::kK ? GroupedGemmKernel<BMajor::kK> : GroupedGemmKernel<BMajor::kN>;
  const cudaError_t e =
      LaunchTiled(kernel, kSharedBytes, p.block_count * kBlockM, shape.n, 1, stream, a_map, b_map,
                  p.blocks, static_cast<uint8_t*>(p.rows_out), order,
                  static_cast<int>(shape.k / kBlockK), static_cast<int>(p.oc), shape.n);
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainer
