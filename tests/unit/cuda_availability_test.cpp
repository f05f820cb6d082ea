// MakeCudaBackend in every build: a clear kEnvironment error without CUDA or without a GPU (the
// message says what to do), and a working bf16 backend named "cuda:0" where a GPU is visible.
#include <gtest/gtest.h>

#include "model/backend.h"

namespace trainer {
namespace {

TEST(CudaAvailability, FactoryAnswersForThisBuildAndMachine) {
  std::unique_ptr<Backend> backend;
  const Status status = MakeCudaBackend(0, &backend);
  if (!CudaBackendCompiled()) {
    EXPECT_EQ(status.code(), ExitCode::kEnvironment);
    EXPECT_NE(status.message().find("built without CUDA"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("Global.device=cpu"), std::string::npos) << status.message();
    EXPECT_EQ(backend, nullptr);
    return;
  }
  const int devices = VisibleCudaDevices();
  if (devices == 0) {
    EXPECT_EQ(status.code(), ExitCode::kEnvironment);
    EXPECT_NE(status.message().find("no CUDA device visible"), std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("Global.device=cpu"), std::string::npos) << status.message();
    EXPECT_EQ(backend, nullptr);
    return;
  }
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(backend->name(), "cuda:0");
  EXPECT_EQ(backend->compute_dtype(), DType::kBF16);
  EXPECT_TRUE(backend->device_memory());
  std::unique_ptr<Backend> missing;
  const Status out_of_range = MakeCudaBackend(devices + 3, &missing);
  EXPECT_EQ(out_of_range.code(), ExitCode::kEnvironment);
  EXPECT_NE(out_of_range.message().find("does not exist"), std::string::npos)
      << out_of_range.message();
}

}  // namespace
}  // namespace trainer
