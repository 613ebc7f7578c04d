// GPU smoke tests: skipped cleanly where CUDA is not available.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "normlab/kernels/capabilities.h"
#include "normlab/kernels/ops.h"
#include "normlab/util/device.h"
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
  EXPECT_FALSE(normlab::kernels::own_kernels_archs().empty())
      << "normlab was built without its CUDA kernels";
}

TEST(GpuKernels, AddRmsNormMatchesTheReference) {
  NORMLAB_REQUIRE_CUDA();
  const torch::Device cuda(torch::kCUDA);
  // Fusable shapes and dtypes, with rows beyond one grid (1500 > 1024 blocks) and widths that
  // are not multiples of a warp or of the block.
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 7}, {5, 64}, {1500, 1000}, {33, 2048}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    EXPECT_TRUE(normlab::kernels::fusable_add_rms_norm(torch::zeros({rows, cols}, cuda),
                                                       torch::zeros({rows, cols}, cuda),
                                                       torch::ones({cols}, cuda)));
    EXPECT_TRUE(normlab::test::add_rms_norm_matches_reference(cuda, torch::kFloat, torch::kFloat,
                                                              rows, cols, 1.0, 1e-5));
    EXPECT_TRUE(normlab::test::add_rms_norm_matches_reference(cuda, torch::kFloat, torch::kBFloat16,
                                                              rows, cols, 2.8, 1e-5));
    EXPECT_TRUE(normlab::test::add_rms_norm_matches_reference(
        cuda, torch::kBFloat16, torch::kBFloat16, rows, cols, 1.0, 2e-2));
  }
  // Not fusable: a bf16 stream with an fp32 branch, a non-contiguous input, a CPU gain.
  const torch::Tensor x = torch::zeros({4, 8}, cuda);
  EXPECT_FALSE(
      normlab::kernels::fusable_add_rms_norm(x.to(torch::kBFloat16), x, torch::ones({8}, cuda)));
  EXPECT_FALSE(normlab::kernels::fusable_add_rms_norm(torch::zeros({8, 4}, cuda).t(), x,
                                                      torch::ones({8}, cuda)));
  EXPECT_FALSE(normlab::kernels::fusable_add_rms_norm(x, x, torch::ones({8})));
}
