#include <gtest/gtest.h>
#include <torch/torch.h>

#include "normlab/util/device.h"
#include "normlab/version.h"

TEST(Device, ReportsTheLibTorchItWasBuiltAgainst) {
  const std::string v = normlab::torch_version();
  EXPECT_EQ(
      v.rfind(std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR), 0),
      0u)
      << v;
}

TEST(Device, CudaDevicesAgreeWithAvailability) {
  const auto devices = normlab::cuda_devices();
  if (!normlab::cuda_available()) {
    EXPECT_TRUE(devices.empty());
  } else {
    ASSERT_EQ(static_cast<int64_t>(devices.size()),
              static_cast<int64_t>(torch::cuda::device_count()));
    EXPECT_FALSE(devices[0].name.empty());
    EXPECT_GT(devices[0].memory_gib, 0.0);
  }
}

TEST(Device, VersionStringMatchesComponents) {
  EXPECT_EQ(std::string(NORMLAB_VERSION_STRING), std::to_string(NORMLAB_VERSION_MAJOR) + "." +
                                                     std::to_string(NORMLAB_VERSION_MINOR) + "." +
                                                     std::to_string(NORMLAB_VERSION_PATCH));
}
