// Early stopping of a sweep's points by asynchronous successive halving (ASHA; Li et al.,
// "A System for Massively Parallel Hyperparameter Tuning", MLSys 2020).
//
// Rungs are the steps min_steps * reduction^k below the run's length. A point runs to its next
// rung and pauses there with a checkpoint and its validation loss. Whenever a run slot is free,
// the scheduler first promotes a paused point (from the highest rung down) that is among the
// best floor(n / reduction) of the n points that have reached that rung so far, and only then
// starts a new point. Once nothing runs and nothing is left to start, each rung also promotes
// its best point if it has promoted none, so the best point always runs to the end. Points left
// paused when the sweep ends are stopped at their rung: a point whose validation loss is not in
// the top 1/reduction of the points that reached that rung never runs past it.
//
// Pure bookkeeping: the sweep runner (sweep.h) launches and reports; this decides.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace normlab {

struct AshaOptions {
  int64_t min_steps = 0;  // the first rung
  int64_t reduction = 3;  // eta: each rung keeps the best 1/eta
  int64_t steps = 0;      // the points' train.steps
};

class Asha {
 public:
  /// Throws ConfigError unless 0 < min_steps < steps and reduction >= 2.
  explicit Asha(const AshaOptions& options);

  /// min_steps * reduction^k for every k with a rung below `steps`.
  const std::vector<int64_t>& rungs() const { return rungs_; }
  /// The step a point at `step` runs to next: the next rung above it, or the run's end.
  int64_t next_target(int64_t step) const;
  /// The rung index of `step`, if it is a rung.
  std::optional<size_t> rung_of(int64_t step) const;

  /// Point `point` reached rung `rung` with validation loss `loss` (pausing there, unless
  /// `passed`: it already ran on, e.g. a run finished before the sweep used early stopping).
  void report(size_t point, size_t rung, double loss, bool passed = false);
  /// The next point to promote past its rung, or none. `settled`: no point runs and none is
  /// left to start, so no more points can reach any rung except by promotion.
  std::optional<size_t> promote(bool settled);
  /// The rung a point is paused at (reported and not promoted), if any.
  std::optional<size_t> paused_at(size_t point) const;

 private:
  struct Arrival {
    size_t point;
    double loss;
    bool promoted;
  };
  AshaOptions o_;
  std::vector<int64_t> rungs_;
  std::vector<std::vector<Arrival>> arrivals_;  // per rung
};

}  // namespace normlab
