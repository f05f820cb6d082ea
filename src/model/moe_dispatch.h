// Expert parallelism's dispatch and combine for the MoE layer (moe_layer.h): with ep ranks in
// the EP group, rank i holds experts [i E/ep, (i+1) E/ep). Each rank routes its own tokens and
// plans its permutation as without EP (tokens grouped by expert, experts ascending), so the rows
// for rank p's experts are one contiguous block of its permuted rows:
//
//   counts exchange    per (peer, local expert) kept rows              AllToAllCounts (E/ep each)
//   dispatch           x_perm rows -> x_recv on the experts' ranks     AllToAllV, rows of C
//   experts            each local expert over each source rank's run   (source order, token order)
//   combine's return   y_recv -> y rows at the source                  the reverse AllToAllV
//
// x_recv holds the source ranks' blocks in rank order, each block grouped by local expert in
// token order. The backward sends dy the same way and dx back. Which tokens a capacity drops is
// decided on the source rank over its own micro-batch (moe_layer.h), as without EP.
#pragma once

#include <cstdint>
#include <vector>

#include "common/communicator.h"
#include "common/tensor.h"
#include "model/backend.h"

namespace trainer {

// ExpertRun (backend.h): rows [offset, offset + rows) of the expert-side buffers, all for local
// expert `expert`.

// The rows moved between the ranks of the EP group, per peer (in rows).
struct ExpertExchange {
  std::vector<int64_t> send_rows, send_at;  // (ep) block of x_perm for each peer's experts
  std::vector<int64_t> recv_rows, recv_at;  // (ep) block of x_recv from each source rank
  std::vector<int64_t> recv_expert_rows;    // (ep, E/ep) rows from each source per local expert
  int64_t recv_total = 0;
  // The same blocks in elements of rows of `cols` values, as the all-to-alls take them (made
  // once by the plan: the exchanges of a micro-batch allocate nothing).
  int64_t cols = 0;
  std::vector<int64_t> send_count, send_displ, recv_count, recv_displ;
};

// The runs of kept rows by expert from `offsets` (E+1, the permutation's group starts): the
// experts' work without EP (every expert local).
void LocalExpertRuns(const std::vector<int64_t>& offsets, std::vector<ExpertRun>* runs);

// With EP: the counts exchange over `ep` (every member calls it with its own offsets), the plan
// of `x` for rows of `cols` values, and the runs over x_recv: local expert by local expert, each
// source rank's rows in rank order. `capacity_rows` is what the x_recv buffers hold; more is an
// error naming the layer.
Status PlanExpertExchange(Communicator* ep, const std::vector<int64_t>& offsets,
                          int64_t capacity_rows, int64_t cols, ExpertExchange* x,
                          std::vector<ExpertRun>* runs);

// Rows of the plan's `cols` columns: x_perm's blocks to the experts' ranks (to_experts), or the
// expert side's blocks back to their source ranks.
Status ExchangeExpertRows(Communicator* ep, const ExpertExchange& x, Tensor from, Tensor to,
                          bool to_experts);

}  // namespace trainer
