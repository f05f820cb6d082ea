// A 40-line model of LayerNormBackwardRegisterKernel's synchronisation, for Compute Sanitizer's
// racecheck (docs/gpu.md, "Compute Sanitizer"): 16 warps in 8 row groups of 2; each group runs
// rows r = group, group + 8, ... < rows, and per row its two warps swap a value through shared
// memory around a named barrier (bar.sync group + 1, 64); then the groups add their sums into one
// shared row in turns, one __syncthreads() after each turn. The printed sum is exact
// (sum of 2r over r < rows); racecheck (2025.3.1, H200) reported a RAW hazard between turns where
// the groups passed their named barrier different numbers of times (rows = 1, 5, 100; once none at
// 100), and none where every group passed it equally often (rows = 0, 8) or without the named
// barrier (second argument 0). The kernel itself now evens out the passes (an idle pass for the
// groups with a row fewer), and racecheck reports nothing there.
//   nvcc -O2 -lineinfo -arch=sm_90 -o named_barrier_race tests/sanitizer/named_barrier_race.cu
//   compute-sanitizer --tool racecheck ./named_barrier_race [rows [named]]
#include <cstdio>
#include <cstdlib>
template <bool kNamed>
__global__ void Kernel(float* out, int rows) {
  __shared__ float sums[64];
  __shared__ float2 slots[2][8][2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = warp / 2, member = warp % 2;
  float acc = 0.f;
  int parity = 0;
  for (int r = group; r < rows; r += 8) {
    if (kNamed) {
      if (lane == 0) slots[parity][group][member] = make_float2(r, 0);
      asm volatile("bar.sync %0, %1;" ::"r"(group + 1), "r"(64) : "memory");
      acc += slots[parity][group][0].x + slots[parity][group][1].x;
      parity ^= 1;
    } else {
      acc += r;
    }
  }
  const int c = member * 32 + lane;
  for (int turn = 0; turn < 8; ++turn) {
    if (group == turn) sums[c] = (turn == 0 ? 0.f : sums[c]) + acc;
    __syncthreads();
  }
  if (threadIdx.x < 64) out[blockIdx.x * 64 + threadIdx.x] = sums[threadIdx.x];
}
int main(int argc, char** argv) {
  float* out;
  cudaMalloc(&out, 4 * 64 * sizeof(float));
  const int rows = argc > 1 ? atoi(argv[1]) : 100;
  const bool named = argc > 2 ? atoi(argv[2]) != 0 : true;
  if (named)
    Kernel<true><<<4, 512>>>(out, rows);
  else
    Kernel<false><<<4, 512>>>(out, rows);
  float h[64];
  cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
  float want = 0.f;  // every group's sum: 2r (named) or r per row r
  for (int r = 0; r < rows; ++r) want += named ? 2.f * r : r;
  std::printf("rows %d, named barrier %d: out[0] = %g, want %g (%s)\n", rows, named, h[0], want,
              cudaGetErrorString(cudaGetLastError()));
  return h[0] == want ? 0 : 1;
}
