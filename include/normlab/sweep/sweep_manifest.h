// SWEEP_DIR/sweep.json, the manifest of a sweep folder: the base config, the --set list and the
// grid's points it was started with. This module is its only reader and writer: the sweep
// writes it (and refuses a different sweep in the same folder), the reports take their title
// from it, and `normlab sweep --report` rebuilds the reports from its points.
#pragma once

#include <string>
#include <vector>

#include "normlab/config/sweep_grid.h"

namespace normlab {

struct SweepManifest {
  std::string config;                  // the base config, as an absolute path
  std::vector<std::string> overrides;  // the --set list of every point
  std::vector<SweepPoint> points;      // scheme, lr, seed and name (no overrides)
};

/// The path of SWEEP_DIR's manifest.
std::string sweep_manifest_path(const std::string& sweep_dir);

/// Reads SWEEP_DIR/sweep.json. Throws FileError when it cannot be read, ConfigError when it is
/// not a sweep manifest.
SweepManifest sweep_manifest_read(const std::string& sweep_dir);

/// Writes SWEEP_DIR/sweep.json for `spec` and its points. A manifest already there must be of
/// the same base config and overrides: a second sweep in the same folder would mix
/// incomparable runs, so it is refused with a ConfigError.
void sweep_manifest_write(const std::string& sweep_dir, const SweepSpec& spec,
                          const std::vector<SweepPoint>& points);

}  // namespace normlab
