// A run folder made from weights that another program trained (`normlab import`): the same
// folder a run writes, so that eval, generate, analyze, export and `train --resume` (fine-tuning
// from there) take it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/util/safetensors.h"

namespace normlab {

/// Writes RUN_DIR/config.yaml (cfg, resolved) and RUN_DIR/checkpoints/step-<step>/ with
/// `weights` (normlab's names; loaded strictly into the model cfg.model builds, `what` naming
/// their source in errors), a fresh AdamW state and the loop state of `step`. Refuses a run
/// folder that already holds checkpoints. Returns the checkpoint folder.
std::string imported_run_save(const TensorDict& weights, const RunConfig& cfg,
                              const std::string& run_dir, int64_t step, const std::string& what);

/// For an import's errors: a tensor's shape as "[a, b]", and up to 12 names, one an indented
/// line each, then how many more.
std::string imported_shape_text(const torch::Tensor& t);
std::string imported_name_lines(const std::vector<std::string>& names);

}  // namespace normlab
