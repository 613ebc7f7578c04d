// A point's state from its run folder, and sweep_status.json (point_state.h).
#include "normlab/sweep/point_state.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "normlab/train/checkpoint.h"
#include "normlab/train/run_summary.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

std::string status_file(const std::string& run_dir) {
  return (fs::path(run_dir) / "sweep_status.json").string();
}

void write_status(const std::string& run_dir, const nlohmann::json& j) {
  const std::string text = j.dump() + "\n";
  write_file_atomic(status_file(run_dir), [&](FileWriter& w) { w.write(text); });
}

}  // namespace

PointState point_state(const std::string& run_dir) {
  if (fs::exists(status_file(run_dir))) {
    try {  // {"state": "crashed" | "stopped", ...}
      const auto j = nlohmann::json::parse(read_file(status_file(run_dir)));
      if (j.value("state", std::string()) == "stopped") return PointState::Stopped;
    } catch (const std::exception&) {
      // unreadable: a crash
    }
    return PointState::Crashed;
  }
  if (const auto s = run_summary_read(run_dir)) {  // unreadable: fall through to the checkpoints
    switch (s->status) {
      case RunStatus::Completed: return PointState::Completed;
      case RunStatus::Diverged: return PointState::Diverged;
      case RunStatus::Interrupted: return PointState::Interrupted;
    }
  }
  if (fs::is_directory(run_dir) && checkpoint_latest(run_dir)) return PointState::Interrupted;
  return PointState::Pending;
}

int64_t point_checkpoint_step(const std::string& run_dir) {
  const auto latest = checkpoint_latest(run_dir);  // ".../checkpoints/step-00000100"
  if (!latest) return 0;
  const std::string name = fs::path(*latest).filename().string();
  return std::strtoll(name.c_str() + name.find('-') + 1, nullptr, 10);
}

std::optional<double> point_val_loss_at(const std::string& run_dir, int64_t step) {
  std::error_code ec;
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(path, ec)) return std::nullopt;
  std::istringstream in(read_file(path));
  std::optional<double> v;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("step", int64_t{-1}) == step && j.contains("val_loss") &&
        j["val_loss"].is_number())
      v = j["val_loss"].get<double>();
  }
  return v;
}

void point_record_crash(const std::string& run_dir, const PointCrash& c) {
  nlohmann::json j = {{"state", "crashed"}, {"exit_code", c.exit_code}};
  if (c.signal) j["signal"] = c.signal;
  if (!c.slurm_state.empty()) j["slurm_state"] = c.slurm_state;
  if (!c.log.empty()) j["log"] = c.log;
  write_status(run_dir, j);
}

void point_record_stopped(const std::string& run_dir, int64_t step, size_t rung) {
  write_status(run_dir, {{"state", "stopped"}, {"step", step}, {"rung", rung}});
}

void point_clear_record(const std::string& run_dir) { fs::remove(status_file(run_dir)); }

int point_crash_exit_code(const std::string& run_dir) {
  try {
    const auto j = nlohmann::json::parse(read_file(status_file(run_dir)));
    return j.value("exit_code", -1);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace normlab
