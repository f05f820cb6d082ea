// The contracts of Backend's grouped matrix products (backend.h: the MoE experts over their row
// groups), checked once for every backend (op_contract.h) before the backend's Run* hook, and the
// hooks' default: one RunMatmulForward / RunMatmulBackward per group (with SwiGLU: then
// RunSwiGluForward / RunSwiGluBackward per span of groups), the plain loop that is the CPU's
// implementation (its twin for the GPU's grouped GEMMs) and the GPU's fallback.
#include <algorithm>
#include <utility>

#include "model/backend.h"
#include "model/op_contract.h"

namespace trainer {

using contract::OpContract;

namespace {

// weights (E,OC,C) compute; the row-side tensors' widths: in_name's C, out_name's OC; every group
// names an expert of weights and rows inside both, and no two groups overlap.
void CheckGroups(OpContract& c, DType cd, const char* in_name, Tensor in, const char* out_name,
                 Tensor out, Tensor weights, const std::vector<ExpertRun>& groups) {
  c.Has("weights", weights, cd, -1).Dims("weights", weights, 3);
  if (!c.status().ok()) return;
  const int64_t E = weights.dim(0), OC = weights.dim(1), C = weights.dim(2);
  c.Has(in_name, in, cd, -1)
      .Agree(in_name, in, "weights", weights, "C (last dimensions)", Cols(in), C)
      .Has(out_name, out, cd, -1)
      .Agree(out_name, out, "weights", weights, "OC (last dimension, dimension 1)", Cols(out), OC);
  if (!c.status().ok()) return;
  const int64_t rows = std::min(Rows(in), Rows(out));
  std::vector<std::pair<int64_t, int64_t>> spans;  // (offset, end) of the non-empty groups
  for (size_t i = 0; i < groups.size(); ++i) {
    const ExpertRun& g = groups[i];
    c.Require(
        g.expert >= 0 && g.expert < E && g.offset >= 0 && g.rows >= 0 && g.offset + g.rows <= rows,
        StrFormat("group %zu (expert %lld, rows [%lld, %lld)) is outside weights %s or the "
                  "%lld rows of %s %s and %s %s",
                  i, static_cast<long long>(g.expert), static_cast<long long>(g.offset),
                  static_cast<long long>(g.offset + g.rows), weights.shape_string().c_str(),
                  static_cast<long long>(rows), in_name, in.shape_string().c_str(), out_name,
                  out.shape_string().c_str()));
    if (g.rows > 0) spans.emplace_back(g.offset, g.offset + g.rows);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    c.Require(
        spans[i].first >= spans[i - 1].second,
        StrFormat("groups overlap: rows [%lld, %lld) and [%lld, %lld)",
                  static_cast<long long>(spans[i - 1].first),
                  static_cast<long long>(spans[i - 1].second),
                  static_cast<long long>(spans[i].first), static_cast<long long>(spans[i].second)));
}

// Matrix e of t (the stacked weights or their gradient, as many elements as weights (E,R,C)),
// as (R, C).
Tensor Matrix(Tensor t, Tensor weights, int64_t e) {
  const int64_t R = weights.dim(1), C = weights.dim(2);
  return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(e * R * C) * DTypeSize(t.dtype),
                t.dtype, {R, C});
}

// dweights (optional) f32 with as many elements as weights; dweights_squares (optional, with
// dweights) one f64.
void CheckWeightGradient(OpContract& c, Tensor dweights, Tensor weights, Tensor dweights_squares) {
  c.Optional(dweights).SameCount("dweights", dweights, DType::kF32, "weights", weights);
  c.Optional(dweights_squares).Has("dweights_squares", dweights_squares, DType::kF64, 1);
  c.Require(dweights_squares.empty() || !dweights.empty(),
            "dweights_squares without dweights: nothing to sum");
}

// An overwritten weight gradient's experts in no group to zero (the kernels write only the
// others'), each run of such experts one Zero.
Status ZeroExpertsInNoGroup(Backend* be, Tensor dweights, Tensor weights,
                            const std::vector<ExpertRun>& groups, GradientWrite dweights_write) {
  if (dweights.empty() || dweights_write != GradientWrite::kOverwrite) return Status::Ok();
  std::vector<bool> in_group(weights.dim(0), false);
  for (const ExpertRun& g : groups) in_group[g.expert] = in_group[g.expert] || g.rows > 0;
  for (int64_t e = 0; e < weights.dim(0);) {
    int64_t end = e;
    while (end < weights.dim(0) && !in_group[end]) ++end;
    if (end > e) {
      const Tensor first = Matrix(dweights, weights, e);
      TRAINER_RETURN_IF_ERROR(
          be->Zero(Tensor(first.data, DType::kF32, {(end - e) * weights.dim(1), weights.dim(2)})));
    }
    e = end + 1;
  }
  return Status::Ok();
}

// The row spans of the groups with rows, abutting groups joined, in row order (the experts' runs
// tile their rows, listed expert by expert: with expert parallelism each expert's runs are one per
// source rank, the rows source by source): one span for the MoE layer.
std::vector<std::pair<int64_t, int64_t>> AbuttingSpans(const std::vector<ExpertRun>& groups) {
  std::vector<std::pair<int64_t, int64_t>> groups_rows;  // (offset, end), non-overlapping
  for (const ExpertRun& g : groups)
    if (g.rows > 0) groups_rows.emplace_back(g.offset, g.offset + g.rows);
  std::sort(groups_rows.begin(), groups_rows.end());
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& rows : groups_rows) {
    if (!spans.empty() && spans.back().second == rows.first)
      spans.back().second = rows.second;
    else
      spans.push_back(rows);
  }
  return spans;
}

}  // namespace

Status Backend::GroupedMatmulForward(Tensor out, Tensor in, Tensor weights,
                                     const std::vector<ExpertRun>& groups) {
  OpContract c(*this, "GroupedMatmulForward");
  CheckGroups(c, compute_dtype(), "in", in, "out", out, weights, groups);
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunGroupedMatmulForward(out, in, weights, groups);
}

Status Backend::GroupedMatmulSwiGluForward(Tensor h, Tensor act, Tensor in, Tensor weights,
                                           const std::vector<ExpertRun>& groups) {
  const DType cd = compute_dtype();
  OpContract c(*this, "GroupedMatmulSwiGluForward");
  CheckGroups(c, cd, "in", in, "h", h, weights, groups);
  TRAINER_RETURN_IF_ERROR(c.status());
  c.Require(Cols(h) % 2 == 0, "h " + h.shape_string() + " has an odd width ([gate | up])")
      .Has("act", act, cd, Rows(h) * (Cols(h) / 2))
      .Require(Cols(act) == Cols(h) / 2,
               "act " + act.shape_string() + " is not (M, F) for h " + h.shape_string());
  TRAINER_RETURN_IF_ERROR(c.status());
  return RunGroupedMatmulSwiGluForward(h, act, in, weights, groups);
}

Status Backend::GroupedMatmulBackward(Tensor din, Tensor dweights, Tensor dout, Tensor in,
                                      Tensor weights, const std::vector<ExpertRun>& groups,
                                      GradientWrite dweights_write, Tensor dweights_squares) {
  const DType cd = compute_dtype();
  OpContract c(*this, "GroupedMatmulBackward");
  CheckGroups(c, cd, "in", in, "dout", dout, weights, groups);
  c.Optional(din).Like("din", din, cd, "in", in);
  CheckWeightGradient(c, dweights, weights, dweights_squares);
  TRAINER_RETURN_IF_ERROR(c.status());
  TRAINER_RETURN_IF_ERROR(ZeroExpertsInNoGroup(this, dweights, weights, groups, dweights_write));
  return RunGroupedMatmulBackward(din, dweights, dout, in, weights, groups, dweights_write,
                                  dweights_squares);
}

Status Backend::GroupedMatmulSwiGluBackward(Tensor dh, Tensor dweights, Tensor dact, Tensor dout,
                                            Tensor act, Tensor h, Tensor weights,
                                            const std::vector<ExpertRun>& groups,
                                            GradientWrite dweights_write, Tensor dweights_squares,
                                            SwiGluAct act_source) {
  const DType cd = compute_dtype();
  OpContract c(*this, "GroupedMatmulSwiGluBackward");
  CheckGroups(c, cd, "act", act, "dout", dout, weights, groups);
  c.Like("dact", dact, cd, "act", act);
  CheckWeightGradient(c, dweights, weights, dweights_squares);
  c.Has("h", h, cd, -1)
      .Require(Rows(h) == Rows(act) && Cols(h) == 2 * Cols(act),
               "h " + h.shape_string() + " is not (M, 2F) for act " + act.shape_string())
      .Like("dh", dh, cd, "h", h)
      .Require(act_source == SwiGluAct::kRead ||
                   (act.data != h.data && act.data != dh.data && act.data != dact.data &&
                    act.data != dout.data && act.data != weights.data),
               "act, made again here, must not alias h, dh, dact, dout or the weights");
  TRAINER_RETURN_IF_ERROR(c.status());
  TRAINER_RETURN_IF_ERROR(ZeroExpertsInNoGroup(this, dweights, weights, groups, dweights_write));
  return RunGroupedMatmulSwiGluBackward(dh, dweights, dact, dout, act, h, weights, groups,
                                        dweights_write, dweights_squares, act_source);
}

Status Backend::RunGroupedMatmulForward(Tensor out, Tensor in, Tensor weights,
                                        const std::vector<ExpertRun>& groups) {
  SetRaggedGroups(true);
  Status s = Status::Ok();
  for (size_t i = 0; i < groups.size() && s.ok(); ++i) {
    const ExpertRun& g = groups[i];
    if (g.rows == 0) continue;
    s = RunMatmulForward(MatrixRows(out, g.offset, g.rows), Tensor(),
                         MatrixRows(in, g.offset, g.rows), Matrix(weights, weights, g.expert),
                         Tensor(), Activation::kNone);
  }
  SetRaggedGroups(false);
  return s;
}

Status Backend::RunGroupedMatmulSwiGluForward(Tensor h, Tensor act, Tensor in, Tensor weights,
                                              const std::vector<ExpertRun>& groups) {
  TRAINER_RETURN_IF_ERROR(RunGroupedMatmulForward(h, in, weights, groups));
  // SwiGLU over each span of abutting groups (one for the MoE layer).
  for (const auto& [offset, end] : AbuttingSpans(groups))
    TRAINER_RETURN_IF_ERROR(RunSwiGluForward(MatrixRows(act, offset, end - offset),
                                             MatrixRows(h, offset, end - offset)));
  return Status::Ok();
}

Status Backend::RunGroupedMatmulBackward(Tensor din, Tensor dweights, Tensor dout, Tensor in,
                                         Tensor weights, const std::vector<ExpertRun>& groups,
                                         GradientWrite dweights_write, Tensor dweights_squares) {
  SetRaggedGroups(true);
  std::vector<bool> written(weights.dim(0), false);  // the expert's first group (its write)
  Status s = Status::Ok();
  for (size_t i = 0; i < groups.size() && s.ok(); ++i) {
    const ExpertRun& g = groups[i];
    if (g.rows == 0) continue;
    const GradientWrite write = written[g.expert] ? GradientWrite::kAccumulate : dweights_write;
    written[g.expert] = true;
    s = RunMatmulBackward(din.empty() ? Tensor() : MatrixRows(din, g.offset, g.rows),
                          dweights.empty() ? Tensor() : Matrix(dweights, weights, g.expert),
                          Tensor(), MatrixRows(dout, g.offset, g.rows),
                          MatrixRows(in, g.offset, g.rows), Matrix(weights, weights, g.expert),
                          write);
  }
  SetRaggedGroups(false);
  TRAINER_RETURN_IF_ERROR(s);
  if (dweights_squares.empty()) return Status::Ok();
  return RunSumInto(dweights_squares, dweights, SumOf::kSquares, true);
}

Status Backend::RunGroupedMatmulSwiGluBackward(Tensor dh, Tensor dweights, Tensor dact, Tensor dout,
                                               Tensor act, Tensor h, Tensor weights,
                                               const std::vector<ExpertRun>& groups,
                                               GradientWrite dweights_write,
                                               Tensor dweights_squares, SwiGluAct act_source) {
  // Made again, act is written with dh (one pass over h) between the input gradient and the
  // weight gradient that reads it; else the two products run as one op, then the SwiGLU's.
  const bool remake = act_source == SwiGluAct::kRemake;
  TRAINER_RETURN_IF_ERROR(RunGroupedMatmulBackward(dact, remake ? Tensor() : dweights, dout, act,
                                                   weights, groups, dweights_write,
                                                   remake ? Tensor() : dweights_squares));
  for (const auto& [offset, end] : AbuttingSpans(groups))
    TRAINER_RETURN_IF_ERROR(RunSwiGluBackward(
        MatrixRows(dh, offset, end - offset), MatrixRows(dact, offset, end - offset),
        MatrixRows(h, offset, end - offset),
        remake ? MatrixRows(act, offset, end - offset) : Tensor()));
  if (!remake || dweights.empty()) return Status::Ok();
  return RunGroupedMatmulBackward(Tensor(), dweights, dout, act, weights, groups, dweights_write,
                                  dweights_squares);
}

}  // namespace trainer
