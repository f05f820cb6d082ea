// MakeCudaBackend in every build: a clear kEnvironment error without CUDA or without a GPU (the
// message says what to do), and a working bf16 backend named "cuda:0" where a GPU is visible.
// The device name and the check of the MFU denominator against it.
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

TEST(CudaAvailability, DeviceNameWhereThereIsADevice) {
  const std::string name = CudaDeviceName(0);
  EXPECT_EQ(name.empty(), VisibleCudaDevices() == 0) << name;
  EXPECT_EQ(CudaDeviceName(VisibleCudaDevices() + 3), "");
}

TEST(PeakFitsDevice, TheDefaultPeakIsHoppersOnly) {
  for (const char* hopper :
       {"NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H800", "NVIDIA GH200 480GB"})
    EXPECT_TRUE(PeakFitsDevice(hopper, 989.0)) << hopper;
  // PCIe and NVL Hoppers have lower peaks (datasheets: 1513 and 1671 TFLOP/s with sparsity).
  for (const char* other :
       {"NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA H20", "", "NVIDIA H100 PCIe",
        "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA H800 PCIe"})
    EXPECT_FALSE(PeakFitsDevice(other, 989.0)) << other;
  EXPECT_TRUE(PeakFitsDevice("NVIDIA A100-SXM4-80GB", 312.0));  // set by the user: trusted
  EXPECT_EQ(DenseBf16PeakTflops("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(DenseBf16PeakTflops("NVIDIA H200 NVL"), 835);
  EXPECT_EQ(DenseBf16PeakTflops("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(DenseBf16PeakTflops("NVIDIA L40S"), 0);
}

}  // namespace
}  // namespace trainer
