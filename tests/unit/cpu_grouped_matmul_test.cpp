// CpuBackend tests, part 6: the grouped matrix products (the MoE experts over their row groups,
// Backend::GroupedMatmulForward/Backward, GroupedMatmulSwiGluForward/Backward) against a naive
// double-precision loop, over odd sizes, uneven groups, empty experts, every row on one expert,
// experts in two runs (expert parallelism's received rows, listed expert by expert but laid out
// source by source), the weight gradient accumulated and overwritten (and the sum of its squares),
// and rows in no group left as they were; the contract refuses overlapping groups, unknown experts
// and an odd [gate | up].
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "grouped_matmul_cases.h"
#include "model/cpu/cpu_backend.h"

namespace trainer {
namespace {

using grouped_testing::GroupedCase;
using testing::AllClose;
using testing::RandomFloats;
using testing::View;

class CpuGroupedMatmul : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(CpuGroupedMatmul, MatchesNaiveLoop) {
  const GroupedCase& c = GetParam();
  const int64_t M = c.rows, C = c.C, OC = c.OC, E = c.E;
  std::mt19937 rng(1234 + static_cast<uint32_t>(M));
  const std::vector<ExpertRun> groups = grouped_testing::MakeGroups(c, rng);
  auto be = MakeCpuBackend();
  std::vector<float> in = RandomFloats(M * C, 1), w = RandomFloats(E * OC * C, 2),
                     out0 = RandomFloats(M * OC, 3), dout = RandomFloats(M * OC, 4),
                     din0 = RandomFloats(M * C, 5), dw0 = RandomFloats(E * OC * C, 6);
  std::vector<float> out = out0;
  ASSERT_TRUE(be->GroupedMatmulForward(View(out, {M, OC}), View(in, {M, C}), View(w, {E, OC, C}),
                                       groups)
                  .ok());
  EXPECT_TRUE(AllClose(out, grouped_testing::ForwardReference(in, w, out0, groups, C, OC), 1e-5));
  for (int64_t r = M - grouped_testing::kSpareRows; r < M; ++r)
    for (int64_t o = 0; o < OC; ++o) ASSERT_EQ(out[r * OC + o], out0[r * OC + o]) << "row " << r;
  {  // The product with SwiGLU (OC = 2F, [gate | up]): h as the forward's, act = silu(gate) * up
     // of it on the groups' rows, the other rows of both untouched; an odd OC is refused.
    SCOPED_TRACE("forward + SwiGLU");
    const int64_t F = OC / 2;
    std::vector<float> h = out0, act0 = RandomFloats(M * F, 7), act = act0;
    const Status s = be->GroupedMatmulSwiGluForward(View(h, {M, OC}), View(act, {M, F}),
                                                    View(in, {M, C}), View(w, {E, OC, C}), groups);
    if (OC % 2 != 0) {
      EXPECT_NE(s.message().find("odd width"), std::string::npos) << s.message();
    } else {
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_TRUE(testing::BitwiseEqual(h, out));
      std::vector<double> want(act0.begin(), act0.end());
      for (const ExpertRun& g : groups)
        for (int64_t r = g.offset; r < g.offset + g.rows; ++r)
          for (int64_t f = 0; f < F; ++f) {
            const double x = h[r * OC + f], u = h[r * OC + F + f];
            want[r * F + f] = x / (1 + std::exp(-x)) * u;
          }
      EXPECT_TRUE(AllClose(act, want, 1e-5));
      for (int64_t r = M - grouped_testing::kSpareRows; r < M; ++r)
        for (int64_t f = 0; f < F; ++f)
          ASSERT_EQ(act[r * F + f], act0[r * F + f]) << "act's row " << r << " is in no group";
    }
  }
  for (bool accumulate : {true, false}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
    std::vector<float> din = din0, dw = dw0;
    double squares = 0.25;  // += the squares of the dw it leaves
    ASSERT_TRUE(be->GroupedMatmulBackward(
                      View(din, {M, C}), View(dw, {E, OC, C}), View(dout, {M, OC}),
                      View(in, {M, C}), View(w, {E, OC, C}), groups,
                      accumulate ? GradientWrite::kAccumulate : GradientWrite::kOverwrite,
                      Tensor(&squares, DType::kF64, {1}))
                    .ok());
    std::vector<double> want_din, want_dw;
    grouped_testing::BackwardReference(dout, in, w, din0, dw0, groups, C, OC, accumulate,
                                       &want_din, &want_dw);
    EXPECT_TRUE(AllClose(din, want_din, 1e-5));
    EXPECT_TRUE(AllClose(dw, want_dw, 1e-5));
    double want_squares = 0;
    for (float v : dw) want_squares += double(v) * v;
    EXPECT_NEAR(squares - 0.25, want_squares, 1e-9 * want_squares);
    // Each output alone (the other one empty) gives the same.
    std::vector<float> din_only = din0, dw_only = dw0;
    ASSERT_TRUE(be->GroupedMatmulBackward(View(din_only, {M, C}), Tensor(), View(dout, {M, OC}),
                                          View(in, {M, C}), View(w, {E, OC, C}), groups,
                                          GradientWrite::kAccumulate)
                    .ok());
    ASSERT_TRUE(be->GroupedMatmulBackward(Tensor(), View(dw_only, {E, OC, C}), View(dout, {M, OC}),
                                          View(in, {M, C}), View(w, {E, OC, C}), groups,
                                          accumulate ? GradientWrite::kAccumulate
                                                     : GradientWrite::kOverwrite)
                    .ok());
    EXPECT_TRUE(testing::BitwiseEqual(din_only, din));
    EXPECT_TRUE(testing::BitwiseEqual(dw_only, dw));
    {  // The down product's backward with SwiGLU's (C = F; h (M, 2F)): dact as din, dh[R] =
       // SwiGLU's backward of it over h[R] (other rows untouched), dweights as above.
      SCOPED_TRACE("input gradient + SwiGLU backward");
      std::vector<float> h = RandomFloats(M * 2 * C, 8);
      const std::vector<float> dh0 = RandomFloats(M * 2 * C, 9);
      std::vector<float> dh = dh0, dact = din0, dw_swiglu = dw0;
      double swiglu_squares = 0.25;
      ASSERT_TRUE(be->GroupedMatmulSwiGluBackward(
                        View(dh, {M, 2 * C}), View(dw_swiglu, {E, OC, C}), View(dact, {M, C}),
                        View(dout, {M, OC}), View(in, {M, C}), View(h, {M, 2 * C}),
                        View(w, {E, OC, C}), groups,
                        accumulate ? GradientWrite::kAccumulate : GradientWrite::kOverwrite,
                        Tensor(&swiglu_squares, DType::kF64, {1}))
                      .ok());
      EXPECT_TRUE(AllClose(dw_swiglu, want_dw, 1e-5));
      EXPECT_NEAR(swiglu_squares - 0.25, want_squares, 1e-9 * want_squares);
      std::vector<double> want_dh(dh0.begin(), dh0.end());
      for (const ExpertRun& g : groups)
        for (int64_t r = g.offset; r < g.offset + g.rows; ++r)
          for (int64_t f = 0; f < C; ++f) {
            const double x = h[r * 2 * C + f], u = h[r * 2 * C + C + f], dy = want_din[r * C + f];
            const double sig = 1 / (1 + std::exp(-x));
            want_dh[r * 2 * C + f] = dy * u * sig * (1 + x * (1 - sig));
            want_dh[r * 2 * C + C + f] = dy * x * sig;
          }
      EXPECT_TRUE(AllClose(dh, want_dh, 1e-5));
      // act made again (SwiGluAct::kRemake): act[R] = SwiGLU(h[R]) as SwiGluForward writes it,
      // other rows untouched; dh as above to the bit; dweights those of the product with that act.
      std::vector<float> act_made = RandomFloats(M * C, 10), dh_made = dh0, dact_made = din0,
                         dw_made = dw0, act_want = act_made;
      const std::vector<float> act_poison = act_made;
      double made_squares = 0.25;
      for (const ExpertRun& g : groups) {
        if (g.rows == 0) continue;
        ASSERT_TRUE(be->SwiGluForward(MatrixRows(View(act_want, {M, C}), g.offset, g.rows),
                                      MatrixRows(View(h, {M, 2 * C}), g.offset, g.rows))
                        .ok());
      }
      const GradientWrite write =
          accumulate ? GradientWrite::kAccumulate : GradientWrite::kOverwrite;
      ASSERT_TRUE(be->GroupedMatmulSwiGluBackward(
                        View(dh_made, {M, 2 * C}), View(dw_made, {E, OC, C}),
                        View(dact_made, {M, C}), View(dout, {M, OC}), View(act_made, {M, C}),
                        View(h, {M, 2 * C}), View(w, {E, OC, C}), groups, write,
                        Tensor(&made_squares, DType::kF64, {1}), SwiGluAct::kRemake)
                      .ok());
      EXPECT_TRUE(testing::BitwiseEqual(act_made, act_want)) << "act differs from SwiGluForward's";
      EXPECT_TRUE(testing::BitwiseEqual(dh_made, dh));
      std::vector<float> dw_of_act = dw0;
      double act_squares = 0.25;
      ASSERT_TRUE(be->GroupedMatmulBackward(Tensor(), View(dw_of_act, {E, OC, C}),
                                            View(dout, {M, OC}), View(act_want, {M, C}),
                                            View(w, {E, OC, C}), groups, write,
                                            Tensor(&act_squares, DType::kF64, {1}))
                      .ok());
      EXPECT_TRUE(testing::BitwiseEqual(dw_made, dw_of_act));
      EXPECT_EQ(made_squares, act_squares);
      bool any_row_outside = false;
      for (int64_t r = M - grouped_testing::kSpareRows; r < M; ++r)
        for (int64_t f = 0; f < C; ++f) {
          any_row_outside = true;
          ASSERT_EQ(act_made[r * C + f], act_poison[r * C + f]) << "act's row " << r;
        }
      EXPECT_TRUE(any_row_outside);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuGroupedMatmul, ::testing::ValuesIn(grouped_testing::kOddCases),
                         [](const ::testing::TestParamInfo<GroupedCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name)
                             if (ch == ' ') ch = '_';
                           return name;
                         });

TEST(CpuGroupedMatmulContract, RefusesOverlapsAndUnknownExperts) {
  const int64_t M = 8, C = 3, OC = 2, E = 2;
  auto be = MakeCpuBackend();
  std::vector<float> in(M * C), w(E * OC * C), out(M * OC);
  auto run = [&](std::vector<ExpertRun> groups) {
    return be->GroupedMatmulForward(View(out, {M, OC}), View(in, {M, C}), View(w, {E, OC, C}),
                                    groups);
  };
  EXPECT_TRUE(run({{0, 0, 4}, {1, 4, 4}}).ok());
  const Status overlap = run({{0, 0, 5}, {1, 4, 4}});
  EXPECT_FALSE(overlap.ok());
  EXPECT_NE(overlap.message().find("groups overlap"), std::string::npos) << overlap.message();
  EXPECT_FALSE(run({{2, 0, 4}}).ok()) << "expert 2 of 2";
  EXPECT_FALSE(run({{0, 6, 4}}).ok()) << "past the rows";
  std::vector<float> flat(E * OC * C);
  EXPECT_FALSE(be->GroupedMatmulForward(View(out, {M, OC}), View(in, {M, C}),
                                        View(flat, {E * OC, C}), {{0, 0, 4}})
                   .ok())
      << "weights not (E, OC, C)";
  // The SwiGLU backward with act made again (SwiGluAct::kRemake): act is written, so it may not
  // alias an input; the same tensors with act read are fine.
  const int64_t F = 2;  // down's weights (E, OC, F): dout (M, OC), act (M, F), h (M, 2F)
  std::vector<float> dout(M * OC), act(M * F), h(M * 2 * F), dh(M * 2 * F), dact(M * F),
      wd(E * OC * F);
  auto swiglu = [&](Tensor act_tensor, SwiGluAct source) {
    return be->GroupedMatmulSwiGluBackward(View(dh, {M, 2 * F}), Tensor(), View(dact, {M, F}),
                                           View(dout, {M, OC}), act_tensor, View(h, {M, 2 * F}),
                                           View(wd, {E, OC, F}), {{0, 0, 4}, {1, 4, 4}},
                                           GradientWrite::kOverwrite, Tensor(), source);
  };
  EXPECT_TRUE(swiglu(View(act, {M, F}), SwiGluAct::kRemake).ok());
  EXPECT_TRUE(swiglu(View(dout, {M, F}), SwiGluAct::kRead).ok());
  const Status aliased = swiglu(View(dout, {M, F}), SwiGluAct::kRemake);
  EXPECT_FALSE(aliased.ok());
  EXPECT_NE(aliased.message().find("must not alias"), std::string::npos) << aliased.message();
  EXPECT_FALSE(swiglu(View(dact, {M, F}), SwiGluAct::kRemake).ok()) << "act aliases dact";
}

}  // namespace
}  // namespace trainer
