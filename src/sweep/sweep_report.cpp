// A sweep's reports, built from the run folders (summary.json, point_state.h) and the manifest
// (sweep_manifest.h).
#include "normlab/sweep/sweep_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "normlab/sweep/point_state.h"
#include "normlab/sweep/sweep_manifest.h"
#include "normlab/train/run_summary.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

// Distinct values in first-seen order.
template <class T, class F>
std::vector<T> distinct(const std::vector<PointResult>& rs, F get) {
  std::vector<T> out;
  for (const auto& r : rs)
    if (std::find(out.begin(), out.end(), get(r)) == out.end()) out.push_back(get(r));
  return out;
}

std::vector<double> sorted_lrs(const std::vector<PointResult>& rs) {
  auto lrs = distinct<double>(rs, [](const PointResult& r) { return r.point.lr; });
  std::sort(lrs.begin(), lrs.end());
  return lrs;
}

std::vector<PointResult> seeds_of(const std::vector<PointResult>& rs, Scheme s, double lr) {
  std::vector<PointResult> out;
  for (const auto& r : rs)
    if (r.point.scheme == s && r.point.lr == lr) out.push_back(r);
  return out;
}

// The best learning rate of each scheme: the lowest mean perplexity among cells whose seeds
// all completed.
std::map<Scheme, double> best_lrs(const std::vector<PointResult>& rs) {
  std::map<Scheme, double> best;
  std::map<Scheme, double> best_ppl;
  for (Scheme s : distinct<Scheme>(rs, [](const PointResult& r) { return r.point.scheme; }))
    for (double lr : sorted_lrs(rs)) {
      const auto seeds = seeds_of(rs, s, lr);
      if (seeds.empty()) continue;
      const SweepCell c = sweep_cell(seeds);
      if (c.mean_perplexity && (!best_ppl.count(s) || *c.mean_perplexity < best_ppl[s])) {
        best_ppl[s] = *c.mean_perplexity;
        best[s] = lr;
      }
    }
  return best;
}

std::string or_dash(const std::optional<double>& v, int decimals) {
  return v ? format_number(*v, decimals) : "-";
}

std::string state_text(const PointResult& r) {
  switch (r.state) {
    case PointState::Diverged:
      return "diverged @ " + std::to_string(r.diverged_at.value_or(r.steps));
    case PointState::Interrupted: return "interrupted @ " + std::to_string(r.steps);
    case PointState::Stopped: return "stopped @ " + std::to_string(r.steps);
    case PointState::Crashed:
      return r.exit_code && *r.exit_code >= 0
                 ? "crashed (exit " + std::to_string(*r.exit_code) + ")"
                 : std::string("crashed (signal)");
    default: return std::string(enum_name(r.state));
  }
}

}  // namespace

std::string format_number(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

PointResult read_point_result(const std::string& run_dir, const SweepPoint& point) {
  PointResult r;
  r.point = point;
  r.state = point_state(run_dir);
  const auto known = [](double v) {
    return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
  };
  if (const auto s = run_summary_read(run_dir)) {  // a summary that cannot be read counts as none
    r.steps = s->steps;
    r.steps_planned = s->steps_planned;
    if (s->diverged_at >= 0) r.diverged_at = s->diverged_at;
    r.final_train_loss = known(s->final_train_loss);
    if (s->final_val_loss >= 0) r.val_loss = known(s->final_val_loss);
    if (s->val_perplexity >= 0) r.val_perplexity = known(s->val_perplexity);
    r.max_grad_norm = known(s->max_grad_norm);
    r.spikes = s->spikes;
    r.wall_seconds = s->wall_seconds;
  } else if (fs::exists(fs::path(run_dir) / "summary.json")) {
    // unreadable: as if there were none (a crash mid-write)
  } else if (r.state == PointState::Interrupted) {
    r.steps = point_checkpoint_step(run_dir);
  }
  if (r.state == PointState::Crashed) r.exit_code = point_crash_exit_code(run_dir);
  if (r.state != PointState::Completed)
    r.val_perplexity.reset(), r.val_loss.reset();  // not final numbers
  return r;
}

SweepCell sweep_cell(const std::vector<PointResult>& seeds) {
  SweepCell c;
  if (seeds.empty()) return {"-", std::nullopt};
  const bool finished = std::all_of(seeds.begin(), seeds.end(), [](const PointResult& r) {
    return r.state == PointState::Completed || r.state == PointState::Diverged ||
           r.state == PointState::Stopped;
  });
  const std::string of_n = seeds.size() > 1 ? "/" + std::to_string(seeds.size()) + " seeds" : "";
  if (finished) {
    int64_t first = -1;
    size_t n_div = 0;
    for (const auto& r : seeds)
      if (r.state == PointState::Diverged) {
        ++n_div;
        const int64_t at = r.diverged_at.value_or(r.steps);
        first = first < 0 ? at : std::min(first, at);
      }
    if (n_div > 0) {
      c.text = "diverged @ " + std::to_string(first);
      if (seeds.size() > 1) c.text += " (" + std::to_string(n_div) + of_n + ")";
      return c;
    }
    for (const auto& r : seeds)  // early stopping ended it at a rung
      if (r.state == PointState::Stopped)
        return {state_text(r) +
                    (seeds.size() > 1 ? " (seed " + std::to_string(r.point.seed) + ")" : ""),
                std::nullopt};
    double sum = 0.0, sum_sq = 0.0;
    int64_t spikes = 0;
    bool have_all = true;
    for (const auto& r : seeds) {
      have_all = have_all && r.val_perplexity.has_value();
      sum += r.val_perplexity.value_or(0.0);
      sum_sq += r.val_perplexity.value_or(0.0) * r.val_perplexity.value_or(0.0);
      spikes += r.spikes;
    }
    if (!have_all) return {"completed (no validation)", std::nullopt};
    const double n = static_cast<double>(seeds.size());
    const double mean = sum / n;
    c.mean_perplexity = mean;
    c.text = format_number(mean, 2);
    if (seeds.size() > 1)
      c.text +=
          " ± " + format_number(std::sqrt(std::max(0.0, (sum_sq - n * mean * mean) / (n - 1))), 2);
    if (spikes > 0)
      c.text += " (" + std::to_string(spikes) + (spikes == 1 ? " spike)" : " spikes)");
    return c;
  }
  // Not finished: the least finished seed speaks for the cell.
  for (PointState s : {PointState::Crashed, PointState::Interrupted, PointState::Pending})
    for (const auto& r : seeds)
      if (r.state == s)
        return {state_text(r) +
                    (seeds.size() > 1 ? " (seed " + std::to_string(r.point.seed) + ")" : ""),
                std::nullopt};
  return c;
}

std::string sweep_markdown(const std::vector<PointResult>& rs, const std::string& title) {
  const auto schemes = distinct<Scheme>(rs, [](const PointResult& r) { return r.point.scheme; });
  const auto lrs = sorted_lrs(rs);
  const auto seeds = distinct<uint64_t>(rs, [](const PointResult& r) { return r.point.seed; });
  const auto best = best_lrs(rs);
  std::string seed_list;
  for (uint64_t s : seeds) seed_list += (seed_list.empty() ? "" : ", ") + std::to_string(s);

  std::string md = "# Sweep: " + title + "\n\n";
  md +=
      "Final validation perplexity by scheme and peak learning rate (lower is better; **bold**: "
      "the best "
      "learning rate of each scheme). \"diverged @ N\": the loss or gradient became non-finite at "
      "step N. "
      "Spikes: loss spikes counted by the trainer's detector" +
      std::string(seeds.size() > 1 ? ", summed over seeds; ± is the standard deviation over seeds"
                                   : "") +
      ". Seeds: " + seed_list + ".\n\n";
  md += "| scheme |";
  for (double lr : lrs) md += " " + lr_label(lr) + " |";
  md += "\n|---|";
  for (size_t i = 0; i < lrs.size(); ++i) md += "---|";
  md += "\n";
  for (Scheme s : schemes) {
    md += "| " + std::string(enum_name(s)) + " |";
    for (double lr : lrs) {
      const SweepCell c = sweep_cell(seeds_of(rs, s, lr));
      const bool bold = best.count(s) && best.at(s) == lr;
      md += " " + (bold ? "**" + c.text + "**" : c.text) + " |";
    }
    md += "\n";
  }
  int64_t planned = 0, saved = 0, stopped = 0;
  for (const auto& r : rs) {
    planned += r.steps_planned;
    if (r.state == PointState::Stopped) saved += r.steps_planned - r.steps, ++stopped;
  }
  if (stopped > 0)
    md += "\nEarly stopping (ASHA) stopped " + std::to_string(stopped) + " of " +
          std::to_string(rs.size()) + " runs at a rung (\"stopped @ N\"), saving " +
          std::to_string(saved) + " of the grid's " + std::to_string(planned) + " steps (" +
          format_number(100.0 * static_cast<double>(saved) / static_cast<double>(planned), 1) +
          " %).\n";
  md +=
      "\n## Runs\n\n| run | status | steps | train loss | val loss | val ppl | spikes | max grad "
      "norm | time (s) |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rs)
    md += "| " + r.point.name + " | " + state_text(r) + " | " + std::to_string(r.steps) + "/" +
          (r.steps_planned ? std::to_string(r.steps_planned) : std::string("?")) + " | " +
          or_dash(r.final_train_loss, 4) + " | " + or_dash(r.val_loss, 4) + " | " +
          or_dash(r.val_perplexity, 2) + " | " + std::to_string(r.spikes) + " | " +
          or_dash(r.max_grad_norm, 3) + " | " + format_number(r.wall_seconds, 1) + " |\n";
  return md;
}

std::string sweep_csv(const std::vector<PointResult>& rs) {
  std::string csv =
      "run,scheme,lr,seed,status,steps,steps_planned,diverged_at,final_train_loss,val_loss,val_"
      "perplexity,"
      "spikes,max_grad_norm,wall_seconds\n";
  auto num = [](const std::optional<double>& v) {
    return v ? format_number(*v, 6) : std::string();
  };
  for (const auto& r : rs) {
    char lr[32];
    std::snprintf(lr, sizeof lr, "%.9g", r.point.lr);
    csv += r.point.name + "," + std::string(enum_name(r.point.scheme)) + "," + lr + "," +
           std::to_string(r.point.seed) + "," + std::string(enum_name(r.state)) + "," +
           std::to_string(r.steps) + "," + std::to_string(r.steps_planned) + "," +
           (r.diverged_at ? std::to_string(*r.diverged_at) : "") + "," + num(r.final_train_loss) +
           "," + num(r.val_loss) + "," + num(r.val_perplexity) + "," + std::to_string(r.spikes) +
           "," + num(r.max_grad_norm) + "," + format_number(r.wall_seconds, 3) + "\n";
  }
  return csv;
}

std::string sweep_json(const std::vector<PointResult>& rs, const std::string& title) {
  auto num = [](const std::optional<double>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json j = {
      {"title", title}, {"runs", nlohmann::json::array()}, {"best_lr", nlohmann::json::object()}};
  for (const auto& r : rs)
    j["runs"].push_back(
        {{"run", r.point.name},
         {"scheme", std::string(enum_name(r.point.scheme))},
         {"lr", r.point.lr},
         {"seed", r.point.seed},
         {"status", std::string(enum_name(r.state))},
         {"steps", r.steps},
         {"steps_planned", r.steps_planned},
         {"diverged_at", r.diverged_at ? nlohmann::json(*r.diverged_at) : nlohmann::json(nullptr)},
         {"final_train_loss", num(r.final_train_loss)},
         {"val_loss", num(r.val_loss)},
         {"val_perplexity", num(r.val_perplexity)},
         {"spikes", r.spikes},
         {"max_grad_norm", num(r.max_grad_norm)},
         {"wall_seconds", r.wall_seconds},
         {"run_dir", "runs/" + r.point.name}});
  for (const auto& [s, lr] : best_lrs(rs)) j["best_lr"][std::string(enum_name(s))] = lr;
  return j.dump(2) + "\n";
}

std::vector<std::string> sweep_report_files() {
  return {"summary.md", "summary.csv", "summary.json"};
}

std::vector<PointResult> write_sweep_reports(const std::string& sweep_dir,
                                             const std::vector<SweepPoint>& points,
                                             OutputFiles* contract) {
  std::vector<PointResult> rs;
  for (const auto& p : points)
    rs.push_back(read_point_result((fs::path(sweep_dir) / "runs" / p.name).string(), p));
  std::string title = sweep_dir;
  try {
    const SweepManifest m = sweep_manifest_read(sweep_dir);
    if (!m.config.empty()) title = m.config;
    for (const auto& o : m.overrides) title += " --set " + o;
  } catch (const std::exception&) {
    // no manifest yet: the folder names the sweep
  }
  const std::string md = sweep_markdown(rs, title), csv = sweep_csv(rs), js = sweep_json(rs, title);
  const fs::path d(sweep_dir);
  if (contract) contract->keep_previous(/*by_link=*/true, sweep_report_files());
  write_file_atomic((d / "summary.md").string(), [&](FileWriter& w) { w.write(md); });
  write_file_atomic((d / "summary.csv").string(), [&](FileWriter& w) { w.write(csv); });
  write_file_atomic((d / "summary.json").string(), [&](FileWriter& w) { w.write(js); });
  if (contract) contract->record(sweep_report_files());
  return rs;
}

}  // namespace normlab
