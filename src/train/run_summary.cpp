#include "normlab/train/run_summary.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;

int exit_code(RunStatus status) {
  switch (status) {
    case RunStatus::Completed: return 0;
    case RunStatus::Diverged: return 3;
    case RunStatus::Interrupted: return 4;
  }
  return 1;
}

double RunSummary::tokens_per_s() const {
  return wall_seconds > 0 ? static_cast<double>(tokens) / wall_seconds : 0.0;
}

namespace {

nlohmann::json finite(double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; }
nlohmann::json present(double v) { return v >= 0 ? finite(v) : nullptr; }  // -1: absent

// A field that may be null or missing (the default then); anything else of the wrong type is
// an error naming the field.
template <typename T>
T field(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw CheckpointError(path + ": field '" + key + "' is " + it->type_name() +
                          ", not the expected type");
  }
}

}  // namespace

std::string run_summary_json(const RunSummary& s) {
  nlohmann::json tasks = nlohmann::json::object();
  for (const auto& [name, t] : s.tasks)
    tasks[name] = {{"acc", t.acc}, {"acc_norm", t.acc_norm}, {"items", t.items}};
  nlohmann::json j = {{"status", std::string(enum_name(s.status))},
                      {"exit_code", exit_code(s.status)},
                      {"scheme", s.scheme},
                      {"steps", s.steps},
                      {"steps_planned", s.steps_planned},
                      {"diverged_at", s.diverged_at >= 0 ? nlohmann::json(s.diverged_at) : nullptr},
                      {"final_train_loss", finite(s.final_train_loss)},
                      {"final_val_loss", present(s.final_val_loss)},
                      {"val_perplexity", present(s.val_perplexity)},
                      {"spikes", s.spikes},
                      {"max_grad_norm", finite(s.max_grad_norm)},
                      {"skipped_steps", s.skipped_steps},
                      {"tokens", s.tokens},
                      {"wall_seconds", s.wall_seconds},
                      {"tokens_per_s", s.wall_seconds > 0 ? finite(s.tokens_per_s()) : nullptr},
                      {"attention_backend", s.attention_backend},
                      {"parameters", s.parameters},
                      {"peak_memory_bytes", s.peak_memory_bytes},
                      {"tasks", tasks}};
  if (!s.precision.empty()) j["precision"] = s.precision;
  if (s.precision_fp32_seconds && s.precision_bf16_seconds)
    j["precision_timing"] = {{"fp32_seconds", *s.precision_fp32_seconds},
                             {"bf16_seconds", *s.precision_bf16_seconds},
                             {"rows", s.precision_rows},
                             {"source", s.precision_source}};
  if (s.mfu) j["mfu"] = *s.mfu;
  if (s.mfu_spread) j["mfu_spread"] = *s.mfu_spread;
  if (s.peak_flops) j["peak_flops"] = *s.peak_flops;
  if (s.mfu_measured) j["mfu_measured"] = *s.mfu_measured;
  if (s.mfu_steps > 0) j["mfu_steps"] = s.mfu_steps;
  if (!s.gpu.empty()) j["gpu"] = s.gpu;
  if (s.matmul_flops) j["matmul_flops_measured"] = *s.matmul_flops;
  if (s.world_size > 0) {
    j["world_size"] = s.world_size;
    j["rank_state_bytes"] = s.rank_state_bytes;
    j["unsharded_state_bytes"] = s.unsharded_state_bytes;
  }
  return j.dump(2) + "\n";
}

RunSummary run_summary_parse(const std::string& text, const std::string& path) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw CheckpointError(path + ": not a JSON object");
  RunSummary s;
  s.status =
      enum_from_name<RunStatus>(field<std::string>(j, "status", "", path), path + ": status");
  s.scheme = field<std::string>(j, "scheme", "", path);
  s.steps = field<int64_t>(j, "steps", 0, path);
  s.steps_planned = field<int64_t>(j, "steps_planned", 0, path);
  s.diverged_at = field<int64_t>(j, "diverged_at", -1, path);
  s.final_train_loss = field<double>(j, "final_train_loss", NAN, path);
  s.final_val_loss = field<double>(j, "final_val_loss", -1.0, path);
  s.val_perplexity = field<double>(j, "val_perplexity", -1.0, path);
  s.spikes = field<int64_t>(j, "spikes", 0, path);
  s.max_grad_norm = field<double>(j, "max_grad_norm", NAN, path);
  s.skipped_steps = field<int64_t>(j, "skipped_steps", 0, path);
  s.tokens = field<uint64_t>(j, "tokens", 0, path);
  s.wall_seconds = field<double>(j, "wall_seconds", 0.0, path);
  s.attention_backend = field<std::string>(j, "attention_backend", "", path);
  s.precision = field<std::string>(j, "precision", "", path);
  if (const auto t = j.find("precision_timing"); t != j.end() && t->is_object()) {
    s.precision_fp32_seconds = field<double>(*t, "fp32_seconds", 0.0, path);
    s.precision_bf16_seconds = field<double>(*t, "bf16_seconds", 0.0, path);
    s.precision_rows = field<int64_t>(*t, "rows", 0, path);
    s.precision_source = field<std::string>(*t, "source", "", path);
  }
  s.parameters = field<int64_t>(j, "parameters", 0, path);
  s.peak_memory_bytes = field<double>(j, "peak_memory_bytes", 0.0, path);
  if (j.contains("mfu")) s.mfu = field<double>(j, "mfu", 0.0, path);
  if (j.contains("mfu_measured")) s.mfu_measured = field<double>(j, "mfu_measured", 0.0, path);
  if (j.contains("mfu_spread")) s.mfu_spread = field<double>(j, "mfu_spread", 0.0, path);
  if (j.contains("peak_flops")) s.peak_flops = field<double>(j, "peak_flops", 0.0, path);
  s.mfu_steps = field<int64_t>(j, "mfu_steps", 0, path);
  s.gpu = field<std::string>(j, "gpu", "", path);
  if (j.contains("matmul_flops_measured"))
    s.matmul_flops = field<double>(j, "matmul_flops_measured", 0.0, path);
  if (const auto t = j.find("tasks"); t != j.end() && t->is_object())
    for (const auto& [name, v] : t->items())
      s.tasks[name] = {field<double>(v, "acc", 0.0, path), field<double>(v, "acc_norm", 0.0, path),
                       field<int64_t>(v, "items", 0, path)};
  s.world_size = field<int64_t>(j, "world_size", 0, path);
  s.rank_state_bytes = field<int64_t>(j, "rank_state_bytes", 0, path);
  s.unsharded_state_bytes = field<int64_t>(j, "unsharded_state_bytes", 0, path);
  return s;
}

void run_summary_write(const std::string& run_dir, const RunSummary& s) {
  const std::string text = run_summary_json(s);
  write_file_atomic((fs::path(run_dir) / "summary.json").string(),
                    [&](FileWriter& w) { w.write(text); });
}

std::optional<RunSummary> run_summary_read(const std::string& run_dir) {
  const fs::path path = fs::path(run_dir) / "summary.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  try {
    RunSummary s = run_summary_parse(read_file(path.string()), path.string());
    s.run_dir = run_dir;
    return s;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace normlab
