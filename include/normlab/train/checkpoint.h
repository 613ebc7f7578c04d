// Checkpoints: one folder per step under RUN_DIR/checkpoints/, written into a temporary folder
// and renamed when complete, so a reader (or a resumed run) only ever sees whole checkpoints:
//   step-00000100/model.safetensors      model weights (fp32, by parameter name)
//   step-00000100/optimizer.safetensors  AdamW moments and step counts, RNG states
//   step-00000100/state.json             loop state: next step, tokens, spike window, ...
//   step-00000100/config.yaml            the resolved configuration of the run
// A sharded checkpoint (FSDP over W ranks, fsdp.h) has one pair of files per rank instead of
// model/optimizer.safetensors:
//   step-00000100/model.rank-00001-of-00002.safetensors      rank 1's pieces of every parameter
//   step-00000100/optimizer.rank-00001-of-00002.safetensors  its AdamW state and the RNG
// with each piece's start and its parameter's shape in the model file's metadata, and
// "world_size" in state.json. checkpoint_consolidate joins the pieces into a whole checkpoint.
//
// Integrity: state.json, written last, lists every other file of the folder with its size and
// CRC-32 ("files") and carries the CRC-32 of its own content ("crc32"); checkpoint_load checks
// the files it reads and checkpoint_verify all of them, so a flipped bit or a truncated file is
// reported as corruption instead of being trained on. Folders written before these checksums
// existed have no "files" and load unchecked. Interrupted writes leave only a temporary folder
// (step-N.tmp-*), never a step-N, and the next save removes it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/util/error.h"
#include "normlab/util/safetensors.h"

namespace normlab {

// CheckpointError (util/error.h): a checkpoint that is corrupted (checksum or size mismatch,
// missing or malformed file) or cannot be resumed.

/// The training loop's own state at a checkpoint.
struct TrainState {
  int64_t step = 0;           // the next step to run
  uint64_t tokens = 0;        // tokens trained on so far
  double wall_seconds = 0.0;  // training time so far
  double max_grad_norm = 0.0;
  int64_t skipped_steps = 0;
  int64_t spikes = 0;
  std::vector<double> spike_window;
  double last_loss = 0.0;
  double last_val_loss = -1.0;  // -1: not evaluated yet
  std::string precision;        // what the run trains in: "bf16", "fp32" or "fp64" ("": a
                                // checkpoint written before it was recorded)
};

struct Checkpoint {
  std::string path;
  TensorDict model;
  TensorDict optimizer;  // includes "rng.cpu", the CPU generator (the loader's sampling and
                         // the initial weights draw from it; nothing on the GPU draws)
  TrainState state;
  std::string config_yaml;
  // Sharded (world > 1): model and optimizer hold this rank's pieces (1-D); the exp_avg.* and
  // exp_avg_sq.* entries of the optimizer are pieces of the parameter they name.
  int64_t world = 1;
  int64_t rank = 0;
  std::map<std::string, int64_t> starts;               // piece start in the flattened parameter
  std::map<std::string, std::vector<int64_t>> shapes;  // the whole parameter's shape
};

/// Writes RUN_DIR/checkpoints/step-<step> atomically, then deletes all but the newest `keep`.
/// Returns the folder. `fault` (tests only): every file of the checkpoint is written through
/// it (util/file_io.h, WriteFault).
std::string checkpoint_save(const std::string& run_dir, const Checkpoint& ckpt, int64_t keep,
                            WriteFault* fault = nullptr);

/// Every rank of a sharded run calls this with its own pieces (ckpt.world, ckpt.rank, starts,
/// shapes); `barrier` synchronises all ranks (it is called three times). Rank 0 writes
/// state.json and config.yaml, renames the folder and prunes old checkpoints.
std::string checkpoint_save_sharded(const std::string& run_dir, const Checkpoint& ckpt,
                                    int64_t keep, const std::function<void()>& barrier,
                                    WriteFault* fault = nullptr);

/// The world size a checkpoint folder was written with (1: whole, not sharded).
int64_t checkpoint_world(const std::string& dir);

/// The precision recorded in the state.json of checkpoint folder `dir` ("" when none is, as in
/// checkpoints written before it was). Throws CheckpointError when state.json does not read.
std::string checkpoint_precision(const std::string& dir);

/// The newest complete checkpoint folder of a run, if any.
std::optional<std::string> checkpoint_latest(const std::string& run_dir);
/// The checkpoint folder that `source` names: itself (it holds a state.json) or a run folder's
/// newest checkpoint; CheckpointError when it is neither.
std::string checkpoint_folder_of(const std::string& source);

/// Checks every file a checkpoint folder lists (all ranks of a sharded one) against its size and
/// CRC-32; throws CheckpointError naming the file. Returns the files checked (empty for a folder
/// written without checksums).
std::vector<std::string> checkpoint_verify(const std::string& dir);

/// Reads every rank's files of a checkpoint folder as checkpoint_load does and throws
/// CheckpointError, naming the file, the tensor and its first bad element, when a weight or an
/// optimizer moment is not finite, or a second moment or a step count is negative (what
/// `normlab checkpoint verify` adds to checkpoint_verify's checksums).
void checkpoint_check_values(const std::string& dir);

/// The newest checkpoint of a run that passes checkpoint_verify, and the newer ones that did
/// not (folder, reason), newest first. Reads every checkpoint file it checks.
struct IntactCheckpoint {
  std::optional<std::string> dir;
  std::vector<std::pair<std::string, std::string>> corrupted;
};
IntactCheckpoint checkpoint_latest_intact(const std::string& run_dir);

/// Renames a corrupted checkpoint folder step-N to step-N.corrupted[-K], out of the way of
/// resuming and pruning but kept for inspection; returns the new name.
std::string checkpoint_set_aside(const std::string& dir);

/// Loads a checkpoint folder, checking the checksums of the files it reads; errors name the
/// folder and the file. A sharded folder loads rank `rank`'s files (its world size is in the
/// result). A whole folder written before MoE experts were stacked (experts.<e>.up.weight, ...)
/// comes back in the stacked layout, its weights and AdamW moments (nn/experts.h); a sharded
/// one keeps its names (its pieces are slices of the per-expert tensors: consolidate it first).
Checkpoint checkpoint_load(const std::string& dir, int64_t rank = 0);

/// The model weights of a checkpoint folder (joined from the ranks' pieces when sharded), with
/// the checksums of the weights and of config.yaml checked: what eval, analyze and generate need.
TensorDict checkpoint_load_model(const std::string& dir);

/// A whole (world 1) checkpoint from a sharded one: every parameter and moment joined from its
/// pieces in rank order, the rest (step counts, RNG) from the lowest rank holding it. Throws
/// std::runtime_error naming the folder when pieces are missing or do not add up. Per-expert MoE
/// weights and moments come back stacked, as from checkpoint_load.
Checkpoint checkpoint_consolidate(const std::string& dir);

}  // namespace normlab
