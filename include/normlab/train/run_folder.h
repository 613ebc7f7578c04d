// What `normlab train` may do to the files already in its run folder (the output contract,
// util/output_contract.h, as train applies it; docs/reliability.md):
//
// - a run that resumes from a checkpoint continues its own files (metrics.jsonl, the TensorBoard
//   events and diagnostics.jsonl keep the steps up to the checkpoint); a config.yaml that
//   differs from the one it writes (edited by hand) is kept as config.yaml.prev first;
// - a run that starts afresh (no checkpoint) in a folder holding files of the names it writes
//   is refused, naming them, unless --overwrite (they are replaced) or --resume (nothing to
//   resume from: they are kept as NAME.prev, the TensorBoard folder as tensorboard.prev).
#pragma once

#include <string>
#include <vector>

#include "normlab/config/config.h"

namespace normlab {

/// The files of a run folder that `normlab train` writes besides checkpoints/ and .lock, as
/// names relative to the folder, those that exist now: config.yaml, train.log, metrics.jsonl,
/// summary.json, diagnostics.jsonl, the TensorBoard events files (tensorboard/events.out.
/// tfevents.*) and, with diagnostics and `plots`, the diagnostics plots.
std::vector<std::string> run_folder_files(const std::string& run_dir, const RunConfig& cfg,
                                          bool plots);

/// Applies the rules above to `run_dir` before a run opens any file there: sets files aside, or
/// removes train.log (--overwrite). Throws FileError (one line naming the folder, the files and
/// the ways out; nothing changed) for a fresh start over files of its names without --overwrite
/// or --resume. Returns one line for the log per file set aside or replaced. In a run of several
/// processes rank 0 alone calls it (the others start while it writes the folder's files; they
/// stop with the job when it refuses).
std::vector<std::string> prepare_run_folder(const std::string& run_dir, const RunConfig& cfg,
                                            bool resume, bool overwrite, bool plots);

}  // namespace normlab
