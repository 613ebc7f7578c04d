// Checks of the bf16 precision policy (nn/autocast.h) that run on any device: the unit tests
// call them on the CPU (tests/unit/nn/test_bf16_cpu.cpp), the GPU tests on CUDA. Each runs a
// tiny model under bf16 autocast on `device` and compares it with the same model in fp32.
#pragma once

#include <torch/types.h>

#include <string_view>

#include "normlab/nn/model_config.h"

namespace normlab::test {

/// The n hyper-streams of `hyper` ("x") and of SiameseNorm x HC ("y", shape B, T, n, d), with HC
/// and mHC connections of 4 streams, stay fp32 under bf16 autocast on `device`, and the logits
/// stay within 5e-2 (relative to their largest) of the fp32 model's.
void expect_hyper_streams_fp32_under_bf16_autocast(torch::Device device);

/// The chunked loss (7 rows a chunk) and the plain one agree under bf16 autocast on `device`:
/// loss within 1e-3 relative, every gradient within 3e-2.
void expect_chunked_loss_matches_plain_under_bf16(torch::Device device);

/// model.moe.dispatch: the grouped GEMMs and the loop give the same loss, gradients and routing
/// on `device`, in float32 (1e-3) and under bf16 autocast (3e-2). One block, so that both route
/// the same rows (in a deeper model bf16 rounding could flip a later near-tie routing).
void expect_grouped_dispatch_matches_loop(torch::Device device);

}  // namespace normlab::test
