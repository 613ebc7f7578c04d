// A sweep's results as the paper shows them: rows are schemes, columns learning rates, cells
// the final validation perplexity or "diverged @ step". Read from the run folders on disk, so
// the reports can be rebuilt at any time, also while the sweep runs.
//
// SWEEP_DIR/summary.md   the table (best learning rate per scheme in bold) and one row per run
// SWEEP_DIR/summary.csv  one row per run
// SWEEP_DIR/summary.json the same, plus the best learning rate per scheme
// Plots (tools/plot_sweep.py) read summary.json and each run's metrics.jsonl.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "normlab/sweep/sweep.h"

namespace normlab {

class OutputFiles;  // util/output_contract.h

struct PointResult {
  SweepPoint point;
  PointState state = PointState::Pending;
  int64_t steps = 0;  // steps completed
  int64_t steps_planned = 0;
  std::optional<int64_t> diverged_at;
  std::optional<double> final_train_loss, val_loss, val_perplexity, max_grad_norm;
  int64_t spikes = 0;
  double wall_seconds = 0.0;
  std::optional<int> exit_code;  // a crashed child's exit code (-1: killed by a signal)
};

/// The state and summary numbers of one point's run folder.
PointResult read_point_result(const std::string& run_dir, const SweepPoint& point);

/// `v` with `decimals` digits after the point ("22.41").
std::string format_number(double v, int decimals);

/// One table cell: the seeds of one (scheme, lr). All finished and none diverged: the mean
/// perplexity (± the sample standard deviation over seeds) and the spike count summed over
/// seeds; any seed diverged: "diverged @ STEP" (the earliest); otherwise the least finished
/// state ("crashed", "interrupted @ STEP", "pending").
struct SweepCell {
  std::string text;
  std::optional<double> mean_perplexity;  // set when every seed completed
};
SweepCell sweep_cell(const std::vector<PointResult>& seeds);

/// The reports' contents (pure functions of the results, for tests).
std::string sweep_markdown(const std::vector<PointResult>& results, const std::string& title);
std::string sweep_csv(const std::vector<PointResult>& results);
std::string sweep_json(const std::vector<PointResult>& results, const std::string& title);

/// Reads every point's run folder under SWEEP_DIR/runs and writes the three reports atomically.
/// `contract`: the sweep's output contract for SWEEP_DIR (util/output_contract.h), which has
/// claimed the reports' names: an earlier sweep's reports are kept as NAME.prev the first time,
/// and each write is recorded in the folder's ledger.
std::vector<PointResult> write_sweep_reports(const std::string& sweep_dir,
                                             const std::vector<SweepPoint>& points,
                                             OutputFiles* contract = nullptr);

/// The names of the three reports.
std::vector<std::string> sweep_report_files();

}  // namespace normlab
