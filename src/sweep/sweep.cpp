// The sweep runner: a small scheduler that runs `normlab train` for the points `jobs` at a
// time, through a launcher (launcher.h: local child processes, or Slurm jobs), with early
// stopping (asha.h). The grid: sweep_grid.cpp; where the runs compute: placement.cpp; a point's
// state on disk: point_state.cpp; the manifest: sweep_manifest.cpp.
#include "normlab/sweep/sweep.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/config/config_io.h"
#include "normlab/sweep/asha.h"
#include "normlab/sweep/launcher.h"
#include "normlab/sweep/point_state.h"
#include "normlab/sweep/slurm.h"
#include "normlab/sweep/sweep_manifest.h"
#include "normlab/sweep/sweep_report.h"
#include "normlab/train/precision.h"
#include "normlab/train/run_summary.h"
#include "normlab/train/train_flags.h"
#include "normlab/util/device.h"
#include "normlab/util/file_io.h"
#include "sweep/placement.h"

namespace normlab {
namespace fs = std::filesystem;
namespace {

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

}  // namespace

std::vector<std::string> point_command(const SweepPoint& p, const std::string& config,
                                       const std::string& normlab, const std::string& run_dir,
                                       bool gpu, int ranks,
                                       const std::vector<std::string>& launcher) {
  std::vector<std::string> argv;
  if (ranks > 1) {
    if (launcher.empty())
      throw ConfigError("sweep: runs of " + std::to_string(ranks) +
                        " ranks need a launcher (torchrun: the project's Python with torch)");
    argv = launcher;
    argv.insert(argv.end(),
                {"--no-python", "--standalone", "--nproc-per-node", std::to_string(ranks)});
  }
  TrainArgs train;
  train.config = config;
  train.overrides = p.overrides;
  if (gpu) train.overrides.push_back("train.device=cuda");
  train.out = run_dir;
  train.resume = true;
  argv.push_back(normlab);
  for (auto& a : train_command(train)) argv.push_back(std::move(a));
  return argv;
}

namespace {

// ASHA over the points, when the spec asks for early stopping: rungs from the points' shared
// train.steps, each a multiple of eval.every so that a validation loss is measured there.
std::optional<Asha> make_asha(const SweepSpec& spec) {
  if (!spec.early_stop.asha) return std::nullopt;
  const RunConfig base = config_load(spec.config, spec.overrides);
  if (base.eval.every <= 0)
    throw ConfigError("early stopping needs a validation loss at every rung: eval.every = " +
                      std::to_string(base.eval.every) + " (set it with --set eval.every=N)");
  AshaOptions a;
  a.min_steps = spec.early_stop.min_steps > 0 ? spec.early_stop.min_steps : base.eval.every;
  a.reduction = spec.early_stop.reduction;
  a.steps = base.train.steps;
  if (a.min_steps % base.eval.every != 0)
    throw ConfigError("early stopping: min_steps = " + std::to_string(a.min_steps) +
                      " must be a multiple of eval.every = " + std::to_string(base.eval.every) +
                      ", so that every rung has a validation loss");
  return Asha(a);
}

// One sweep invocation: launches the points still to run as children, at most `jobs` at a
// time, records how each ended, and passes a stop request on to the running children.
class SweepRunner {
 public:
  SweepRunner(const SweepSpec& spec, const SweepOptions& o, std::vector<SweepPoint> points,
              Placement pl, std::optional<Asha> asha, std::unique_ptr<RunLauncher> launcher)
      : spec_(spec),
        o_(o),
        points_(std::move(points)),
        pl_(std::move(pl)),
        asha_(std::move(asha)),
        launcher_(std::move(launcher)) {
    slot_busy_.assign(
        pl_.gpu && !pl_.slots.empty() ? pl_.slots.size() : static_cast<size_t>(pl_.jobs), false);
  }

  SweepOutcome run() {
    // Runs an earlier sweep here started that still run (Slurm jobs): followed, not started.
    std::map<size_t, int64_t> attached;
    for (const auto& [i, target] : launcher_->attach()) attached[i] = target;
    for (size_t i = 0; i < points_.size(); ++i) {
      const PointState st = point_state(dir_of(i));
      if (asha_ && st != PointState::Pending)
        report_rungs(i, st, attached.count(i) ? attached[i] : -1);
      if (attached.count(i))
        follow(i, attached[i]);
      else if (st == PointState::Completed || st == PointState::Diverged)
        ++outcome_.skipped;
      else if (asha_ && asha_->paused_at(i) && !(st == PointState::Stopped && o_.resume_stopped))
        ;  // waits at its rung for a promotion
      else
        todo_.push_back(i);
    }
    say("sweep: " + std::to_string(points_.size()) + " runs (" + std::to_string(outcome_.skipped) +
        " finished before, " +
        (running_.empty() ? "" : std::to_string(running_.size()) + " still running, ") +
        std::to_string(todo_.size()) + " to run), " + std::to_string(pl_.jobs) + " at a time" +
        (!launcher_->where().empty() ? " " + launcher_->where()
         : pl_.gpu                   ? " on GPUs"
         : pl_.env.count("OMP_NUM_THREADS")
             ? ", " + pl_.env.at("OMP_NUM_THREADS") + " thread(s) each"
             : ""));
    write_sweep_reports(o_.out, points_, o_.contract);
    while (poll()) {
    }
    outcome_.interrupted += static_cast<int>(todo_.size() - next_);  // never launched
    if (asha_ && signalled_ == 0) mark_stopped();
    write_sweep_reports(o_.out, points_, o_.contract);
    return outcome_;
  }

 private:
  struct Child {
    size_t point;
    size_t slot;
    std::chrono::steady_clock::time_point start;
    fs::file_time_type launched;  // to tell this child's summary.json from an earlier one
    int64_t target;               // the step it runs to: a rung (early stopping) or the end
  };

  // A point found on disk: the rungs it passed (finished before, or promoted then
  // interrupted) and the rung it waits at (its newest checkpoint is a rung with a validation
  // loss there).
  // `running_to` >= 0: the point runs (was promoted) towards that step, past the rungs below.
  void report_rungs(size_t i, PointState st, int64_t running_to) {
    const std::string dir = dir_of(i);
    const int64_t step = running_to >= 0 ? running_to : point_checkpoint_step(dir);
    const bool finished = st == PointState::Completed || st == PointState::Diverged;
    for (size_t k = 0; k < asha_->rungs().size(); ++k) {
      const int64_t r = asha_->rungs()[k];
      const auto v = point_val_loss_at(dir, r);
      if (!v || (!finished && r > step)) break;
      if (running_to >= 0 && r >= running_to) break;  // its job reports that rung when it ends
      asha_->report(i, k, *v, /*passed=*/finished || r < step || o_.resume_stopped);
    }
  }

  // Points still waiting at a rung when nothing is left to run: stopped there for good.
  void mark_stopped() {
    for (size_t i = 0; i < points_.size(); ++i) {
      const auto k = asha_->paused_at(i);
      if (!k) continue;
      const int64_t at = asha_->rungs()[*k];
      point_record_stopped(dir_of(i), at, *k);
      const RunConfig cfg = config_load(spec_.config, points_[i].overrides);
      ++outcome_.stopped;
      outcome_.steps_saved += cfg.train.steps - at;
      say(points_[i].name + ": stopped @ step " + std::to_string(at) + " (early stopping)");
    }
  }

  void say(const std::string& s) const {
    if (o_.say) o_.say(s);
  }
  std::string dir_of(size_t idx) const {
    return (fs::path(o_.out) / "runs" / points_[idx].name).string();
  }

  // One round: pass on a stop request, launch what fits, reap a finished child (or wait a
  // little). False when nothing is left to do.
  bool poll() {
    const int stop = o_.stop ? o_.stop->load() : 0;
    if (stop > signalled_) {
      launcher_->stop(stop);
      if (signalled_ == 0 && !running_.empty())
        say("sweep: stopping " + std::to_string(running_.size()) +
            " run(s); each saves a checkpoint");
      signalled_ = stop;
    }
    while (stop == 0 && static_cast<int>(running_.size()) < pl_.jobs) {
      // Early stopping: a promotion first, then a new point.
      const bool settled = next_ >= todo_.size() && running_.empty();
      if (const auto p = asha_ ? asha_->promote(settled) : std::nullopt) {
        launch(*p);
        continue;
      }
      if (next_ >= todo_.size()) break;
      if (FileLock::busy((fs::path(dir_of(todo_[next_])) / ".lock").string()))
        break;  // a killed earlier child still exiting
      launch(todo_[next_++]);
    }
    if (running_.empty() && (stop != 0 || next_ >= todo_.size())) return false;
    const std::optional<RunEnd> end = launcher_->poll();
    if (!end) return true;
    for (size_t i = 0; i < running_.size(); ++i)
      if (running_[i].point == end->point) {
        const Child c = running_[i];
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        slot_busy_[c.slot] = false;
        finish(c, *end);
        break;
      }
    return true;
  }

  // A run an earlier sweep started, still going: followed like one launched now.
  void follow(size_t idx, int64_t target) {
    size_t slot = 0;
    while (slot < slot_busy_.size() && slot_busy_[slot]) ++slot;
    if (slot == slot_busy_.size()) slot_busy_.push_back(false);
    slot_busy_[slot] = true;
    running_.push_back(
        {idx, slot, std::chrono::steady_clock::now(), fs::file_time_type::clock::now(), target});
    ++followed_;
    say("follow " + points_[idx].name + " (started by an earlier sweep, to step " +
        std::to_string(target) + ")");
  }

  void launch(size_t idx) {
    const SweepPoint& p = points_[idx];
    const std::string dir = dir_of(idx);
    fs::create_directories(dir);
    const PointState before = point_state(dir);
    point_clear_record(dir);
    RunStart l;
    l.point = idx;
    l.name = p.name;
    l.dir = dir;
    // The child sees only its slot's devices, numbered from 0; K > 1 of them: K ranks (FSDP).
    l.argv = point_command(p, spec_.config, o_.normlab, dir, pl_.gpu,
                           pl_.gpu ? std::max(spec_.gpus_per_run, 1) : 1, o_.launcher);
    // Early stopping: run to the next rung only (a stopped point resumed to the end: all).
    const int64_t step = point_checkpoint_step(dir);
    const int64_t steps = config_load(spec_.config, p.overrides).train.steps;
    int64_t target = steps;
    if (asha_ && !(before == PointState::Stopped && o_.resume_stopped))
      target = std::min(asha_->next_target(step), steps);
    l.target = target;
    if (target < steps)
      l.argv.insert(l.argv.end(), {train_flags::kStopAfter.name, std::to_string(target - step)});
    size_t slot = 0;
    while (slot_busy_[slot]) ++slot;
    std::map<std::string, std::string> child_env = pl_.env;
    if (pl_.gpu) child_env["CUDA_VISIBLE_DEVICES"] = pl_.slots[slot];
    l.env = environment_with(o_.environment, child_env);
    l.console = (fs::path(dir) / "console.log").string();
    {
      std::string cmd;
      for (const auto& a : l.argv) cmd += (cmd.empty() ? "" : " ") + a;
      FILE* f = std::fopen(l.console.c_str(), "a");
      if (!f) throw FileError(l.console + ": cannot open: " + std::strerror(errno));
      std::fprintf(f, "==== %s normlab sweep: %s%s\n", now_text().c_str(),
                   pl_.gpu ? ("CUDA_VISIBLE_DEVICES=" + pl_.slots[slot] + " ").c_str() : "",
                   cmd.c_str());
      std::fclose(f);
    }
    const fs::file_time_type launched = fs::file_time_type::clock::now();
    const std::string where = launcher_->start(l);
    running_.push_back({idx, slot, std::chrono::steady_clock::now(), launched, target});
    slot_busy_[slot] = true;
    say(std::string(before == PointState::Pending ? "start  " : "resume ") + p.name +
        (pl_.gpu && !pl_.slots.empty() ? " on GPU " + pl_.slots[slot] : "") +
        (target < steps ? " to step " + std::to_string(target) : "") + " (" + where + ")");
  }

  void finish(const Child& c, const RunEnd& end) {
    const SweepPoint& p = points_[c.point];
    const std::string dir = dir_of(c.point);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - c.start).count();
    const int code = end.exit_code;
    std::string what;
    // A launcher (torchrun) reports any failing rank as exit 1, a diverged run included: its
    // own summary.json, written after this child started, says what happened.
    std::error_code ec;
    const fs::path summary = fs::path(dir) / "summary.json";
    const bool fresh_summary =
        fs::exists(summary, ec) && fs::last_write_time(summary, ec) >= c.launched;
    if (asha_ && code == exit_code(RunStatus::Interrupted) && signalled_ == 0 &&
        point_checkpoint_step(dir) == c.target && asha_->rung_of(c.target)) {
      // Paused at a rung: its validation loss there decides whether it goes on.
      const auto v = point_val_loss_at(dir, c.target);
      if (!v)
        throw DataError(dir + "/metrics.jsonl: no validation loss at rung step " +
                        std::to_string(c.target) + " (a validation split is needed)");
      asha_->report(c.point, *asha_->rung_of(c.target), *v);
      say("rung " + std::to_string(c.target) + ": " + p.name + " val loss " + format_number(*v, 4) +
          " (" + format_number(secs, 0) + " s)");
      write_sweep_reports(o_.out, points_, o_.contract);
      return;
    }
    if (code == exit_code(RunStatus::Completed) || code == exit_code(RunStatus::Diverged) ||
        code == exit_code(RunStatus::Interrupted) || fresh_summary ||
        (signalled_ > 0 && end.state == "CANCELLED")) {  // a queued job the sweep cancelled
      const PointState st = point_state(dir);
      what = std::string(enum_name(st));
      if (st == PointState::Completed)
        ++outcome_.completed;
      else if (st == PointState::Diverged)
        ++outcome_.diverged;
      else
        ++outcome_.interrupted;
      const PointResult r = read_point_result(dir, p);
      if (r.val_perplexity) what += ", val ppl " + format_number(*r.val_perplexity, 2);
      if (r.diverged_at) what += " at step " + std::to_string(*r.diverged_at);
    } else {
      point_record_crash(dir, {code, end.signal, end.state, end.log});
      const std::string log = end.log.empty() ? dir + "/console.log" : end.log;
      what = !end.state.empty() ? "crashed (Slurm " + end.state + ", exit " + std::to_string(code) +
                                      "; see " + log + ")"
             : end.signal ? "crashed (signal " + std::to_string(end.signal) + ")"
                          : "crashed (exit " + std::to_string(code) + "; see " + log + ")";
      ++outcome_.crashed;
    }
    ++done_;
    say("[" + std::to_string(done_) + "/" + std::to_string(todo_.size() + followed_) + "] " +
        p.name + ": " + what + " (" + format_number(secs, 0) + " s)");
    write_sweep_reports(o_.out, points_, o_.contract);
  }

  const SweepSpec& spec_;
  const SweepOptions& o_;
  const std::vector<SweepPoint> points_;
  const Placement pl_;
  std::optional<Asha> asha_;
  std::unique_ptr<RunLauncher> launcher_;
  SweepOutcome outcome_;
  std::vector<size_t> todo_;  // indices of the points to run, in order
  std::vector<Child> running_;
  std::vector<bool> slot_busy_;
  size_t next_ = 0, done_ = 0, followed_ = 0;
  int signalled_ = 0;  // the stop level already passed on to the children
};

}  // namespace

namespace {

// KEY's value in KEY=VALUE lines, or "".
std::string environment_value(const std::vector<std::string>& env, const std::string& key) {
  for (const std::string& kv : env)
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
  return "";
}

// A sweep's points share one precision decision: where train.precision = auto (or bf16) asks
// for a measurement on a CPU with native bf16, each distinct model is measured here, once, with
// the threads and oneDNN limit its children will have, into the cache they read
// (precision_probe.h). Without this the first children would measure side by side, each
// slowing the other, and could decide differently.
void share_precision_decision(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                              const Placement& pl, const SweepOptions& o) {
  std::string limit = environment_value(o.environment, "ONEDNN_MAX_CPU_ISA");
  if (limit.empty()) limit = environment_value(o.environment, "DNNL_MAX_CPU_ISA");
  std::string threads = pl.env.count("OMP_NUM_THREADS")
                            ? pl.env.at("OMP_NUM_THREADS")
                            : environment_value(o.environment, "OMP_NUM_THREADS");
  const int before = at::get_num_threads();
  const int n = threads.empty() ? before : std::max(1, std::atoi(threads.c_str()));
  const CpuClass cpu = cpu_class(limit);
  std::map<std::string, bool> done;
  for (const SweepPoint& p : points) {
    const RunConfig cfg = config_load(spec.config, p.overrides);
    // CPU points only, without resolving the device (a CUDA point is placed, not checked, here).
    const std::string& d = cfg.train.device;
    if (!(d == "cpu" || (d == "auto" && !cuda_available())) ||
        !precision_needs_timing(cfg.train.precision, torch::Device(torch::kCPU), cpu))
      continue;
    const int64_t tokens = cfg.train.micro_batch * cfg.data.seq_len;
    const std::string key =
        precision_probe_key(cfg.model, precision_probe_rows(cfg.model, tokens), cpu, n);
    if (done[key]) continue;
    done[key] = true;
    at::set_num_threads(n);
    const PrecisionTiming t = precision_timing(cfg.model, tokens, cpu, [&](const std::string& m) {
      if (o.say) o.say("warning: " + m);
    });
    at::set_num_threads(before);
    if (o.say)
      o.say("precision for the points' model (d_model " + std::to_string(cfg.model.d_model) +
            "): " + (t.bf16_faster() ? "bf16" : "fp32") + " under train.precision = auto; " +
            describe_timing(t));
  }
}

}  // namespace

SweepOutcome run_sweep(const SweepSpec& spec, const SweepOptions& o) {
  if (o.out.empty()) throw ConfigError("sweep: no output folder (--out)");
  std::vector<SweepPoint> points = sweep_points(spec);  // validates everything first
  Placement pl = o.use_slurm ? place_slurm_runs(spec, o, points.size()) : place_runs(spec, o);
  std::optional<Asha> asha = make_asha(spec);
  fs::create_directories(fs::path(o.out) / "runs");
  const FileLock lock((fs::path(o.out) / "sweep.lock").string(), "a normlab sweep runs there");
  sweep_manifest_write(o.out, spec, points);
  if (!o.use_slurm) share_precision_decision(spec, points, pl, o);  // Slurm: each node its own
  std::unique_ptr<RunLauncher> launcher;
  if (o.use_slurm) {
    std::vector<std::string> names;
    for (const auto& p : points) names.push_back(p.name);
    launcher = make_slurm_launcher(o.slurm, o.out, std::move(names), o.environment);
  } else {
    launcher = make_local_launcher();
  }
  return SweepRunner(spec, o, std::move(points), std::move(pl), std::move(asha),
                     std::move(launcher))
      .run();
}

}  // namespace normlab
