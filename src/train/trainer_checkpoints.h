// The trainer's run folder: its lock, config.yaml and checkpoints. Opening it refuses a folder
// that holds checkpoints unless the run resumes; resume() restores the newest intact
// checkpoint into the run state (after checking that the config may continue it), save()
// writes the state's checkpoint (sharded under FSDP). Private to src/train/.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "normlab/util/file_io.h"
#include "train/trainer_context.h"
#include "train/trainer_state.h"

namespace normlab {

class RunCheckpoints {
 public:
  /// Creates options.run_dir and takes its lock (rank 0 for all ranks). Throws ConfigError
  /// without a folder, CheckpointError for one with checkpoints and no options.resume.
  explicit RunCheckpoints(const RunContext& ctx);

  /// Whether the run continues a checkpoint (options.resume, and the folder holds one).
  bool resuming() const { return resuming_; }
  /// Restores `state` from the newest intact checkpoint; corrupted newer ones are set aside.
  void resume(const RunContext& ctx, RunState& state);
  /// Writes the resolved config.yaml (rank 0); the checkpoints carry the same text.
  void write_config(const RunContext& ctx);
  /// A checkpoint of the state's current step; returns its description (folder, pruning).
  std::string save(const RunContext& ctx, RunState& state);

 private:
  std::unique_ptr<FileLock> lock_;
  std::optional<std::string> latest_;  // the newest checkpoint in the run folder
  bool resuming_ = false;
  std::string config_yaml_;
};

}  // namespace normlab
