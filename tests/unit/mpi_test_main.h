// The shared parts of the MPI gtests' main(): gtest and MPI set up, gtest's results printed by
// rank 0 only, and the exit code every rank's verdict (so that a failure on any rank fails the
// test under mpiexec).
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "mpi_bootstrap/mpi_runtime.h"

namespace trainer {

// gtest's flags taken, then MPI started; false when MPI could not start.
inline bool InitMpiTests(int* argc, char*** argv, std::unique_ptr<MpiRuntime>* runtime) {
  ::testing::InitGoogleTest(argc, *argv);
  return MpiRuntime::Init(argc, argv, runtime).ok();
}

inline void PrintResultsOnRankZeroOnly(int rank) {
  if (rank == 0) return;
  ::testing::TestEventListeners& l = ::testing::UnitTest::GetInstance()->listeners();
  delete l.Release(l.default_result_printer());
}

// The highest of the ranks' `failed`, after which MPI is finalised.
inline int WorldVerdict(MpiRuntime* runtime, int failed) {
  if (!runtime->world()->AllReduce(&failed, 1, DType::kI32, ReduceOp::kMax).ok()) failed = 1;
  runtime->Finalize();
  return failed;
}

// The whole main() of an MPI gtest: MPI and gtest set up, every test run (*runtime_out, where
// given, is the runtime meanwhile), rank 0 printing, the world's verdict as the exit code.
inline int RunMpiTests(int argc, char** argv, MpiRuntime** runtime_out = nullptr) {
  std::unique_ptr<MpiRuntime> runtime;
  if (!InitMpiTests(&argc, &argv, &runtime)) return 1;
  if (runtime_out != nullptr) *runtime_out = runtime.get();
  PrintResultsOnRankZeroOnly(runtime->rank());
  return WorldVerdict(runtime.get(), RUN_ALL_TESTS());
}

}  // namespace trainer
