// GPU smoke tests: skipped cleanly where CUDA is not available.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "normlab/device.h"
#include "support.h"

TEST(GpuSmoke, MatmulMatchesCpu) {
  NORMLAB_REQUIRE_CUDA();
  torch::manual_seed(0);
  const auto a = torch::randn({64, 128}), b = torch::randn({128, 32});
  const auto cpu = torch::matmul(a, b);
  const auto gpu = torch::matmul(a.cuda(), b.cuda()).cpu();
  EXPECT_TRUE(torch::allclose(cpu, gpu, 1e-4, 1e-4));
}

TEST(GpuSmoke, OwnKernelsBuiltForTheDevice) {
  NORMLAB_REQUIRE_CUDA();
  EXPECT_FALSE(normlab::own_kernels_archs().empty()) << "normlab was built without its CUDA kernels";
}
