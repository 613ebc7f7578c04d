#include "normlab/train/run_folder.h"

#include <algorithm>
#include <filesystem>

#include "normlab/config/config_io.h"
#include "normlab/eval/diagnostics.h"
#include "normlab/train/checkpoint.h"
#include "normlab/util/error.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

constexpr const char* kEventsPrefix = "events.out.tfevents.";

bool is_file(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  return fs::exists(st) && !fs::is_directory(st);
}

}  // namespace

std::vector<std::string> run_folder_files(const std::string& run_dir, const RunConfig& cfg,
                                          bool plots) {
  std::vector<std::string> names = {"config.yaml", "train.log", "metrics.jsonl", "summary.json",
                                    "diagnostics.jsonl"};
  if (cfg.diagnostics.every > 0 && plots)
    for (const std::string& p : diagnostics_plot_files()) names.push_back(p);
  std::vector<std::string> out;
  for (const std::string& n : names)
    if (is_file(fs::path(run_dir) / n)) out.push_back(n);
  std::error_code ec;
  const fs::path tb = fs::path(run_dir) / "tensorboard";
  std::vector<std::string> events;
  if (fs::is_directory(tb, ec))
    for (const auto& e : fs::directory_iterator(tb, ec))
      if (e.path().filename().string().rfind(kEventsPrefix, 0) == 0)
        events.push_back("tensorboard/" + e.path().filename().string());
  std::sort(events.begin(), events.end());
  out.insert(out.end(), events.begin(), events.end());
  return out;
}

std::vector<std::string> prepare_run_folder(const std::string& run_dir, const RunConfig& cfg,
                                            bool resume, bool overwrite, bool plots) {
  std::vector<std::string> lines;
  const fs::path dir(run_dir);
  if (checkpoint_latest(run_dir)) {
    // Resuming continues the run's own files (or the trainer refuses without --resume). A
    // config.yaml edited since it was written is kept before the resolved one replaces it.
    const fs::path config = dir / "config.yaml";
    if (resume && is_file(config) && read_file(config.string()) != config_to_yaml(cfg))
      lines.push_back(
          config.string() + ": differs from this run's resolved configuration: kept as " +
          fs::path(keep_as_prev(config.string(), /*by_link=*/true)).filename().string());
    return lines;
  }
  const std::vector<std::string> present = run_folder_files(run_dir, cfg, plots);
  if (present.empty()) return lines;
  if (!overwrite && !resume) {
    std::string names;
    for (const std::string& n : present) names += (names.empty() ? "" : ", ") + n;
    throw FileError(run_dir + ": holds " + names +
                    " (an earlier run's or yours) and no checkpoint to resume from: pass "
                    "--overwrite to start afresh over them, or choose another --out (nothing was "
                    "changed)");
  }
  if (overwrite) {
    // The trainer rewrites the others from the start; train.log it would append to.
    if (is_file(dir / "train.log")) fs::remove(dir / "train.log");
    for (const std::string& n : present)
      lines.push_back((dir / n).string() + ": replaced (--overwrite)");
    return lines;
  }
  bool events = false;
  for (const std::string& n : present) {
    if (n.rfind("tensorboard/", 0) == 0) {
      events = true;
      continue;
    }
    const std::string to = keep_as_prev((dir / n).string());
    lines.push_back((dir / n).string() + ": no checkpoint to resume from: kept as " +
                    fs::path(to).filename().string());
  }
  if (events) {
    const std::string to = keep_as_prev((dir / "tensorboard").string());
    lines.push_back((dir / "tensorboard").string() + ": no checkpoint to resume from: kept as " +
                    fs::path(to).filename().string());
  }
  return lines;
}

}  // namespace normlab
