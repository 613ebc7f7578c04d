// How one point of a sweep stands, read from its run folder: summary.json (run_summary.h), its
// checkpoints, metrics.jsonl, and RUN_DIR/sweep_status.json, which the sweep writes when a
// child crashed or early stopping stopped the point for good. This module is the only reader and
// writer of sweep_status.json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "normlab/util/name_table.h"

namespace normlab {

/// How a point stands on disk, from its run folder.
enum class PointState { Pending, Completed, Diverged, Interrupted, Crashed, Stopped };

// clang-format off
template <> struct EnumNames<PointState> {
  static constexpr NameRow<PointState> rows[] = {
    {PointState::Pending, "pending"}, {PointState::Completed, "completed"}, {PointState::Diverged, "diverged"},
    {PointState::Interrupted, "interrupted"}, {PointState::Crashed, "crashed"},
    {PointState::Stopped, "stopped"}};
};
// clang-format on

/// Completed or diverged (summary.json says so), interrupted (summary.json says so, or a
/// checkpoint without a summary), crashed (the sweep recorded a failed child in
/// sweep_status.json and no later summary exists), stopped (early stopping paused it at a rung
/// for good: sweep_status.json), else pending.
PointState point_state(const std::string& run_dir);

/// The step of the run folder's newest checkpoint (0 without one).
int64_t point_checkpoint_step(const std::string& run_dir);

/// The validation loss that the run folder's metrics.jsonl records at `step`, if any.
std::optional<double> point_val_loss_at(const std::string& run_dir, int64_t step);

/// How a child ended that did not end as a run does (completed, diverged, interrupted).
struct PointCrash {
  int exit_code = -1;       // -1: it did not exit by itself
  int signal = 0;           // the signal that ended it, when one did
  std::string slurm_state;  // Slurm's final state of its job; "" locally
  std::string log;          // where its output is; "" for console.log
};

/// Records in sweep_status.json that the point's child crashed.
void point_record_crash(const std::string& run_dir, const PointCrash& crash);
/// Records in sweep_status.json that early stopping stopped the point at rung `rung` (`step`).
void point_record_stopped(const std::string& run_dir, int64_t step, size_t rung);
/// Removes sweep_status.json before the point runs again.
void point_clear_record(const std::string& run_dir);
/// The exit code sweep_status.json records for a crashed point (-1: none, or unreadable).
int point_crash_exit_code(const std::string& run_dir);

}  // namespace normlab
