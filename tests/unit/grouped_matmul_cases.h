// Cases for the grouped matrix products' tests (Backend::GroupedMatmulForward/Backward, CPU and
// GPU): row groups as the MoE plans them (uneven, empty experts, every row on one expert, each
// expert in two runs as with expert parallelism's received rows), a few rows in no group, and the
// naive double-precision reference of both ops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "model/backend.h"

namespace trainer {
namespace grouped_testing {

struct GroupedCase {
  const char* name;
  int64_t rows, C, OC;  // rows of the row-side tensors (the last kSpareRows in no group)
  int E;
  const char* split;  // "uneven", "empty experts", "one expert", "two runs"
};

inline std::ostream& operator<<(std::ostream& os, const GroupedCase& c) {
  return os << c.name << " (rows " << c.rows << ", C " << c.C << ", OC " << c.OC << ", E " << c.E
            << ")";
}

constexpr int64_t kSpareRows = 3;

// Odd sizes (no leading dimension a multiple of 8), every split.
constexpr GroupedCase kOddCases[] = {
    {"uneven", 61, 13, 7, 9, "uneven"},
    {"empty experts", 40, 5, 11, 6, "empty experts"},
    {"one expert", 29, 9, 6, 5, "one expert"},
    {"two runs", 53, 7, 10, 4, "two runs"},
    {"one expert of one", 10, 3, 2, 1, "uneven"},
};

// Rows [0, rows - kSpareRows) split over the experts by `split`, groups listed expert by expert.
inline std::vector<ExpertRun> MakeGroups(const GroupedCase& c, std::mt19937& rng) {
  const int64_t used = c.rows - kSpareRows;
  const std::string split = c.split;
  const int sources = split == "two runs" ? 2 : 1;
  // Rows per (source, expert): random shares, experts left empty by the split.
  std::vector<double> share(sources * c.E);
  std::uniform_real_distribution<double> dist(0.1, 1.0);
  for (int s = 0; s < sources; ++s) {
    for (int e = 0; e < c.E; ++e) {
      double v = dist(rng);
      if (split == "empty experts" && e % 2 == 1) v = 0;
      if (split == "uneven" && e % 4 == 2) v = 0;
      if (split == "uneven" && e % 3 == 0) v *= 8;
      if (split == "one expert") v = e == c.E / 2 ? 1 : 0;
      if (split == "two runs" && s == 1 && e == 0) v = 0;  // one expert with a single run
      share[s * c.E + e] = v;
    }
  }
  double total = 0;
  for (double v : share) total += v;
  std::vector<int64_t> count(share.size());
  int64_t given = 0;
  for (size_t i = 0; i < share.size(); ++i) given += count[i] = int64_t(used * share[i] / total);
  for (size_t i = share.size(); i-- > 0 && given < used;)  // the rounding's rest to the last one
    if (share[i] > 0) count[i] += used - given, given = used;
  // Offsets source-major (as x_recv holds them), groups expert-major (as PlanExpertExchange).
  std::vector<int64_t> offset(share.size());
  int64_t at = 0;
  for (size_t i = 0; i < share.size(); ++i) offset[i] = at, at += count[i];
  std::vector<ExpertRun> groups;
  for (int e = 0; e < c.E; ++e)
    for (int s = 0; s < sources; ++s)
      if (count[s * c.E + e] > 0) groups.push_back({e, offset[s * c.E + e], count[s * c.E + e]});
  return groups;
}

// out (rows, OC): in[r] W[e]^T on the groups' rows, `out0` elsewhere.
inline std::vector<double> ForwardReference(const std::vector<float>& in,
                                            const std::vector<float>& w,
                                            const std::vector<float>& out0,
                                            const std::vector<ExpertRun>& groups, int64_t C,
                                            int64_t OC) {
  std::vector<double> out(out0.begin(), out0.end());
  for (const ExpertRun& g : groups)
    for (int64_t r = g.offset; r < g.offset + g.rows; ++r)
      for (int64_t o = 0; o < OC; ++o) {
        double sum = 0;
        for (int64_t c = 0; c < C; ++c)
          sum += double(in[r * C + c]) * w[(g.expert * OC + o) * C + c];
        out[r * OC + o] = sum;
      }
  return out;
}

// din (rows, C) = dout[r] W[e] on the groups' rows, `din0` elsewhere; dW (E, OC, C): dw0, with
// each expert that has a group first zeroed when !accumulate, plus sum over its rows of
// dout[r]^T in[r].
inline void BackwardReference(const std::vector<float>& dout, const std::vector<float>& in,
                              const std::vector<float>& w, const std::vector<float>& din0,
                              const std::vector<float>& dw0, const std::vector<ExpertRun>& groups,
                              int64_t C, int64_t OC, bool accumulate, std::vector<double>* din,
                              std::vector<double>* dw) {
  din->assign(din0.begin(), din0.end());
  // Overwritten: every expert's matrix starts from zero, those in no group included.
  if (accumulate)
    dw->assign(dw0.begin(), dw0.end());
  else
    dw->assign(dw0.size(), 0.0);
  for (const ExpertRun& g : groups)
    for (int64_t r = g.offset; r < g.offset + g.rows; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0;
        for (int64_t o = 0; o < OC; ++o)
          sum += double(dout[r * OC + o]) * w[(g.expert * OC + o) * C + c];
        (*din)[r * C + c] = sum;
      }
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t c = 0; c < C; ++c)
          (*dw)[(g.expert * OC + o) * C + c] += double(dout[r * OC + o]) * in[r * C + c];
    }
}

}  // namespace grouped_testing
}  // namespace trainer
