// Streams: the residual state flowing through the blocks, and the Probe that observes it.
// Single-stream schemes use x and leave y undefined; ResiDual and SiameseNorm carry both
// (x: the bounded, Post-Norm-like stream; y: the Pre-Norm-like stream with a clean identity).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string_view>

namespace normlab {

struct Streams {
  torch::Tensor x;  // (B, T, C)
  torch::Tensor y;  // (B, T, C) or undefined
};

/// Receives named intermediates while the model runs, without the model knowing what is done
/// with them: ("x", l, X) and ("y", l, Y) after block l, layer -1 at the entry (after the
/// embedding), and ("z", n_layers, Z) for the fused output that feeds the head.
using Probe = std::function<void(std::string_view name, int64_t layer, const torch::Tensor& t)>;

}  // namespace normlab
