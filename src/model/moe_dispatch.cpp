// Expert parallelism's exchange plan and row movement (moe_dispatch.h).
#include "model/moe_dispatch.h"

#include <string>

#include "common/log.h"

namespace trainer {

std::vector<ExpertRun> LocalExpertRuns(const std::vector<int64_t>& offsets) {
  std::vector<ExpertRun> runs;
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t n = offsets[e + 1] - offsets[e];
    if (n > 0) runs.push_back({static_cast<int64_t>(e), offsets[e], n});
  }
  return runs;
}

Status PlanExpertExchange(Communicator* ep, const std::vector<int64_t>& offsets,
                          int64_t capacity_rows, ExpertExchange* x, std::vector<ExpertRun>* runs) {
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
  const int n = ep->size();
  const int64_t cols = Cols(from);
  std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
  for (int p = 0; p < n; ++p) {
    sc[p] = (to_experts ? x.send_rows[p] : x.recv_rows[p]) * cols;
    sd[p] = (to_experts ? x.send_at[p] : x.recv_at[p]) * cols;
    rc[p] = (to_experts ? x.recv_rows[p] : x.send_rows[p]) * cols;
    rd[p] = (to_experts ? x.recv_at[p] : x.send_at[p]) * cols;
  }
  return ep->AllToAllV(from.data, sc.data(), sd.data(), to.data, rc.data(), rd.data(), from.dtype);
}

}  // namespace trainer
