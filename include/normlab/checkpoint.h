// Checkpoints: one folder per step under RUN_DIR/checkpoints/, written into a temporary folder
// and renamed when complete, so a reader (or a resumed run) only ever sees whole checkpoints:
//   step-00000100/model.safetensors      model weights (fp32, by parameter name)
//   step-00000100/optimizer.safetensors  AdamW moments and step counts, RNG states
//   step-00000100/state.json             loop state: next step, tokens, spike window, ...
//   step-00000100/config.yaml            the resolved configuration of the run
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "normlab/safetensors.h"

namespace normlab {

/// The training loop's own state at a checkpoint.
struct TrainState {
  int64_t step = 0;             // the next step to run
  uint64_t tokens = 0;          // tokens trained on so far
  double wall_seconds = 0.0;    // training time so far
  double max_grad_norm = 0.0;
  int64_t skipped_steps = 0;
  int64_t spikes = 0;
  std::vector<double> spike_window;
  double last_loss = 0.0;
  double last_val_loss = -1.0;  // -1: not evaluated yet
};

struct Checkpoint {
  std::string path;
  TensorDict model;
  TensorDict optimizer;  // includes "rng.cpu" (and "rng.cuda" on GPU runs)
  TrainState state;
  std::string config_yaml;
};

/// Writes RUN_DIR/checkpoints/step-<step> atomically, then deletes all but the newest `keep`.
/// Returns the folder.
std::string checkpoint_save(const std::string& run_dir, const Checkpoint& ckpt, int64_t keep);

/// The newest complete checkpoint folder of a run, if any.
std::optional<std::string> checkpoint_latest(const std::string& run_dir);

/// Loads a checkpoint folder; errors name the folder and the file.
Checkpoint checkpoint_load(const std::string& dir);

}  // namespace normlab
