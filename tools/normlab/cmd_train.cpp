// normlab train --config X.yaml [--set k=v ...] [--out RUN_DIR] [--resume]
// SIGINT/SIGTERM: the first one finishes the current step, saves a checkpoint and exits with
// code 4 (resumable); a second one ends the process at once (checkpoints are atomic).
#include <csignal>
#include <filesystem>
#include <iostream>

#include "command.h"
#include "python_tool.h"
#include "normlab/config_io.h"
#include "normlab/cpu_allocator.h"
#include "normlab/log.h"
#include "normlab/trainer.h"

namespace normlab::cli {
namespace {

std::atomic<bool> g_stop{false};  // written by the signal handler only (main's, not the library's)

extern "C" void on_signal(int sig) {
  if (g_stop.exchange(true)) {  // second signal: default action
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

Runner setup_train(CLI::App& sub) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    std::string out;
    bool resume = false;
    int64_t stop_after = 0;
    bool no_plots = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--config", o->config, "run configuration (YAML)")->required()->check(CLI::ExistingFile);
  sub.add_option("--set", o->overrides, "override a key: section.key=value (repeatable, applied in order)");
  sub.add_option("--out", o->out, "run folder (default: runs/<config name>-<scheme>)");
  sub.add_flag("--resume", o->resume, "continue from the run folder's newest checkpoint");
  sub.add_option("--stop-after", o->stop_after, "checkpoint and stop after N steps of this invocation (exit 4)");
  sub.add_flag("--no-plots", o->no_plots, "with diagnostics on: do not run tools/plot_diagnostics.py");
  sub.footer("Exit codes: 0 completed, 1 error, 3 diverged (non-finite loss or gradient), 4 interrupted (checkpoint saved).");
  return [o] {
    const RunConfig cfg = config_load(o->config, o->overrides);  // all config errors before any work
    std::string out = o->out;
    if (out.empty())
      out = "runs/" + std::filesystem::path(o->config).stem().string() + "-" + std::string(enum_name(cfg.model.scheme));
    std::filesystem::create_directories(out);
    Logger log("train", log_level_from_string(cfg.logging.level), (std::filesystem::path(out) / "train.log").string());
    // CPU tensors of a step are reallocated with the same sizes every step: reuse them
    // instead of returning them to the kernel (docs/training.md, "Speed").
    // Never destroyed: tensors freed during static destruction at exit still return to it.
    static auto* cpu_allocator = new CpuCachingAllocator();
    cpu_allocator->install();
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    TrainOptions opts;
    opts.run_dir = out;
    opts.resume = o->resume;
    opts.stop = &g_stop;
    opts.stop_after = o->stop_after;
    opts.logger = &log;
    const TrainSummary s = train(cfg, opts);
    std::cout << "run " << enum_name(s.status) << " after " << s.steps << " steps";
    if (s.diverged_at >= 0) std::cout << " (diverged at step " << s.diverged_at << ")";
    if (s.val_perplexity >= 0) std::cout << ": validation loss " << s.final_val_loss << ", perplexity " << s.val_perplexity;
    std::cout << "\noutputs: " << out << "/ (summary.json, metrics.jsonl, train.log, checkpoints/"
              << (cfg.diagnostics.every > 0 ? ", diagnostics.jsonl" : "") << ")\n";
    if (cfg.diagnostics.every > 0 && !o->no_plots)
      run_python_tool("plot_diagnostics.py", {(std::filesystem::path(out) / "diagnostics.jsonl").string(), out}, "plots");
    return exit_code(s.status);
  };
}

}  // namespace normlab::cli
