// Expert parallelism's exchange plan and row movement (moe_dispatch.h).
#include "model/moe_dispatch.h"

#include <string>

#include "common/log.h"

namespace trainer {

void LocalExpertRuns(const std::vector<int64_t>& offsets, std::vector<ExpertRun>* runs) {
  runs->clear();
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t n = offsets[e + 1] - offsets[e];
    if (n > 0) runs->push_back({static_cast<int64_t>(e), offsets[e], n});
  }
}

Status PlanExpertExchange(Communicator* ep, const std::vector<int64_t>& offsets,
                          int64_t capacity_rows, int64_t cols, ExpertExchange* x,
                          std::vector<ExpertRun>* runs) {
  const int n = ep->size();
  const int64_t E = static_cast<int64_t>(offsets.size()) - 1, El = E / n;
  // Kept rows per (peer, local expert), and each peer's contiguous block of x_perm.
  std::vector<int64_t> send_expert_rows(E);
  for (int64_t e = 0; e < E; ++e) send_expert_rows[e] = offsets[e + 1] - offsets[e];
  x->send_rows.assign(n, 0);
  x->send_at.assign(n, 0);
  for (int p = 0; p < n; ++p) {
    x->send_at[p] = offsets[p * El];
    x->send_rows[p] = offsets[(p + 1) * El] - offsets[p * El];
  }
  x->recv_expert_rows.assign(E, 0);
  TRAINER_RETURN_IF_ERROR(ep->AllToAllCounts(send_expert_rows.data(), x->recv_expert_rows.data(),
                                             static_cast<size_t>(El)));
  x->recv_rows.assign(n, 0);
  x->recv_at.assign(n, 0);
  x->recv_total = 0;
  for (int s = 0; s < n; ++s) {
    x->recv_at[s] = x->recv_total;
    for (int64_t e = 0; e < El; ++e) x->recv_rows[s] += x->recv_expert_rows[s * El + e];
    x->recv_total += x->recv_rows[s];
  }
  if (x->recv_total > capacity_rows)
    return RuntimeError(StrFormat(
        "MoE dispatch on group %s: %lld rows arrive for this rank's experts, more than the %lld "
        "its buffers hold (ep x tokens x top-k)",
        ep->name().c_str(), static_cast<long long>(x->recv_total),
        static_cast<long long>(capacity_rows)));
  x->cols = cols;
  x->send_count.resize(n);
  x->send_displ.resize(n);
  x->recv_count.resize(n);
  x->recv_displ.resize(n);
  for (int p = 0; p < n; ++p) {
    x->send_count[p] = x->send_rows[p] * cols;
    x->send_displ[p] = x->send_at[p] * cols;
    x->recv_count[p] = x->recv_rows[p] * cols;
    x->recv_displ[p] = x->recv_at[p] * cols;
  }
  // The runs: local expert by local expert, each source rank's rows (in its token order).
  runs->clear();
  for (int64_t e = 0; e < El; ++e) {
    for (int s = 0; s < n; ++s) {
      int64_t at = x->recv_at[s];
      for (int64_t before = 0; before < e; ++before) at += x->recv_expert_rows[s * El + before];
      const int64_t rows = x->recv_expert_rows[s * El + e];
      if (rows > 0) runs->push_back({e, at, rows});
    }
  }
  return Status::Ok();
}

Status ExchangeExpertRows(Communicator* ep, const ExpertExchange& x, Tensor from, Tensor to,
                          bool to_experts) {
  if (Cols(from) != x.cols || Cols(to) != x.cols)
    return RuntimeError(StrFormat("MoE exchange of rows of %lld and %lld values on a plan for %lld",
                                  static_cast<long long>(Cols(from)),
                                  static_cast<long long>(Cols(to)),
                                  static_cast<long long>(x.cols)));
  if (to_experts)
    return ep->AllToAllV(from.data, x.send_count.data(), x.send_displ.data(), to.data,
                         x.recv_count.data(), x.recv_displ.data(), from.dtype);
  return ep->AllToAllV(from.data, x.recv_count.data(), x.recv_displ.data(), to.data,
                       x.send_count.data(), x.send_displ.data(), from.dtype);
}

}  // namespace trainer
