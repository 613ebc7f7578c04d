// normlab sweep --config BASE.yaml --lr 4e-4,1e-3 --scheme pre_norm,siamese_hybrid [--seed 0,1]
//               [--set k=v ...] [--jobs N] [--gpus-per-run K] --out DIR
//               [--launcher slurm [--slurm-args "..."] [--nodes-per-run N --gpus-per-node G]]
// normlab sweep --sweep configs/sweeps/mini.yaml [flags that replace the file's] --out DIR
// normlab sweep --out DIR --report    (rebuild the reports and plots of DIR, run nothing)
// SIGINT/SIGTERM: the first one stops each running child once (it checkpoints, exit 4) and
// launches nothing more; a second one kills the children. Re-running the command continues.
// On Slurm the same holds for the sweep's jobs (scancel); a killed sweep leaves them running,
// and the same command again follows them (SWEEP_DIR/slurm_jobs.json).
#include <csignal>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "command.h"
#include "normlab/config/config_io.h"
#include "normlab/sweep/sweep.h"
#include "normlab/sweep/sweep_manifest.h"
#include "normlab/sweep/sweep_report.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"
#include "python_tool.h"

extern char** environ;

namespace normlab::cli {
namespace fs = std::filesystem;
namespace {

std::atomic<int> g_sweep_stop{0};  // signals received; written by the signal handler only

extern "C" void on_sweep_signal(int) { g_sweep_stop.fetch_add(1); }

}  // namespace

Runner setup_sweep(CLI::App& sub) {
  struct Options {
    std::string config, sweep, out, lr, scheme, seed;
    std::vector<std::string> overrides;
    int jobs = -1, gpus_per_run = -1;
    bool report = false, no_plots = false, resume_stopped = false, overwrite = false;
    std::string early_stop;
    int64_t min_steps = 0, reduction = 0;
    std::string launcher = "local", slurm_args;
    int nodes_per_run = 1, gpus_per_node = 0;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--config", o->config, "base run configuration (YAML)")->check(CLI::ExistingFile);
  sub.add_option("--sweep", o->sweep,
                 "sweep file (configs/sweeps/); the flags below replace its keys")
      ->check(CLI::ExistingFile);
  sub.add_option("--lr", o->lr,
                 "peak learning rates: 4e-4,1e-3,2e-3 or log-spaced FIRST:LAST:COUNT");
  sub.add_option("--scheme", o->scheme, "schemes, comma-separated (default: the config's)");
  sub.add_option("--seed", o->seed, "seeds, comma-separated (default: the config's train.seed)");
  sub.add_option("--set", o->overrides,
                 "override a key of every run: section.key=value (repeatable)");
  sub.add_option("--jobs", o->jobs, "runs at a time (default: 1 on CPU, one per GPU slot)");
  sub.add_option("--gpus-per-run", o->gpus_per_run,
                 "GPUs of each run (disjoint CUDA_VISIBLE_DEVICES sets)");
  sub.add_option("--early-stop", o->early_stop,
                 "asha: stop points that fall behind at the rungs (docs/sweeps.md); none: off")
      ->check(CLI::IsMember({"asha", "none"}));
  sub.add_option("--min-steps", o->min_steps,
                 "early stopping: the first rung (default: eval.every); rungs min_steps x "
                 "reduction^k")
      ->check(CLI::PositiveNumber);
  sub.add_option("--reduction", o->reduction,
                 "early stopping: each rung keeps the best 1/reduction (default 3)")
      ->check(CLI::Range(int64_t{2}, int64_t{1000}));
  sub.add_flag("--resume-stopped", o->resume_stopped,
               "run the points that early stopping stopped to the end");
  sub.add_option("--launcher", o->launcher,
                 "local: child processes here (default); slurm: each run an sbatch job")
      ->check(CLI::IsMember({"local", "slurm"}));
  sub.add_option("--slurm-args", o->slurm_args,
                 "extra sbatch options of every job, e.g. \"--partition=gpu --time=24:00:00\"");
  sub.add_option("--nodes-per-run", o->nodes_per_run, "Slurm: nodes of each run (default 1)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--gpus-per-node", o->gpus_per_node,
                 "Slurm: GPUs of each node, one rank each (default 0: CPU, one task)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* out_flag =
      sub.add_option("--out", o->out, "sweep folder (default: sweeps/<sweep or config name>)");
  sub.add_flag("--overwrite", o->overwrite,
               "replace report and plot files in --out that an earlier sweep of it did not "
               "write (docs/reliability.md)");
  sub.add_flag("--report", o->report, "only rebuild the reports and plots of --out");
  sub.add_flag("--no-plots", o->no_plots, "do not run tools/plot_sweep.py");
  sub.footer(
      "Outputs in DIR: summary.md (the paper-style table), summary.csv, summary.json, "
      "loss_curves.png, "
      "ppl_vs_lr.png, runs/<scheme>-lr<lr>-s<seed>/ (console.log + a normal run folder).\n"
      "Exit codes: 0 every run finished (completed or diverged), 1 error, 4 stopped (re-run to "
      "continue), "
      "5 some runs crashed (see their console.log; re-run to retry them).");
  return [o, out_flag] {
    // The output contract (util/output_contract.h): the reports and plots of an earlier sweep of
    // the folder are kept as NAME.prev, any other file of those names stops it before any work.
    const std::vector<std::string> plots =
        o->no_plots ? std::vector<std::string>{}
                    : std::vector<std::string>{"loss_curves.png", "ppl_vs_lr.png"};
    std::vector<std::string> names = sweep_report_files();
    names.insert(names.end(), plots.begin(), plots.end());
    const auto plot = [&](OutputFiles& contract, const std::string& dir) {
      if (plots.empty()) return;
      contract.keep_previous(/*by_link=*/false, plots);  // matplotlib writes in place
      run_python_tool("plot_sweep.py", {dir}, "plots");
      contract.record(plots);
    };
    const auto notes = [](const OutputFiles& contract) {
      for (const std::string& note : contract.notes())
        std::cerr << "normlab sweep: note: " << note << "\n";
    };
    if (o->report) {
      if (out_flag->count() == 0) throw std::invalid_argument("--report needs --out DIR");
      check_output_path("--out", o->out, {});
      OutputFiles contract(o->out, "sweep", o->overwrite);
      contract.claim(names);
      const std::vector<SweepPoint> points = sweep_manifest_read(o->out).points;
      write_sweep_reports(o->out, points, &contract);
      std::cout << "reports: " << o->out << "/summary.md, summary.csv, summary.json\n";
      plot(contract, o->out);
      notes(contract);
      return 0;
    }
    if (o->config.empty() && o->sweep.empty())
      throw std::invalid_argument("give --config BASE.yaml or --sweep FILE");
    SweepSpec spec = o->sweep.empty() ? SweepSpec{} : sweep_load(o->sweep);
    if (!o->config.empty()) spec.config = o->config;
    if (!o->lr.empty()) sweep_set_axis(spec, "lr", o->lr, "--lr");
    if (!o->scheme.empty()) sweep_set_axis(spec, "scheme", o->scheme, "--scheme");
    if (!o->seed.empty()) sweep_set_axis(spec, "seed", o->seed, "--seed");
    spec.overrides.insert(spec.overrides.end(), o->overrides.begin(), o->overrides.end());
    if (o->jobs >= 0) spec.jobs = o->jobs;
    if (o->gpus_per_run >= 0) spec.gpus_per_run = o->gpus_per_run;
    if (!o->early_stop.empty()) spec.early_stop.asha = o->early_stop == "asha";
    if (o->min_steps > 0) spec.early_stop.min_steps = o->min_steps;
    if (o->reduction > 0) spec.early_stop.reduction = o->reduction;

    std::string out = o->out;
    if (out.empty() && out_flag->count() == 0)
      out = "sweeps/" + fs::path(o->sweep.empty() ? spec.config : o->sweep).stem().string();
    check_output_path("--out", out, {{"--config", spec.config}, {"--sweep", o->sweep}});
    OutputFiles contract(out, "sweep", o->overwrite);
    contract.claim(names);
    std::signal(SIGINT, on_sweep_signal);
    std::signal(SIGTERM, on_sweep_signal);
    SweepOptions opts;
    opts.out = out;
    opts.contract = &contract;
    opts.normlab = fs::read_symlink("/proc/self/exe").string();
    for (char** e = environ; *e; ++e) opts.environment.emplace_back(*e);
    // Runs of several GPUs start under torchrun from the project's Python; NORMLAB_TORCHRUN
    // (a command, split at spaces) replaces it.
    if (const char* t = std::getenv("NORMLAB_TORCHRUN"); t && *t) {
      std::stringstream ss(t);
      for (std::string w; ss >> w;) opts.launcher.push_back(w);
    } else {
      opts.launcher = {project_python(), "-m", "torch.distributed.run"};
    }
    opts.stop = &g_sweep_stop;
    opts.resume_stopped = o->resume_stopped;
    if (o->launcher != "slurm" &&
        (!o->slurm_args.empty() || o->nodes_per_run != 1 || o->gpus_per_node != 0))
      throw std::invalid_argument(
          "--slurm-args, --nodes-per-run and --gpus-per-node need --launcher slurm");
    opts.use_slurm = o->launcher == "slurm";
    opts.slurm.sbatch_args = split_sbatch_args(o->slurm_args);
    opts.slurm.nodes = o->nodes_per_run;
    opts.slurm.gpus_per_node = o->gpus_per_node;
    if (const char* p = std::getenv("NORMLAB_SLURM_POLL"); p && *p)  // seconds; tests
      opts.slurm.poll_seconds = std::atof(p);
    opts.say = [](const std::string& line) { std::cout << line << std::endl; };
    const SweepOutcome r = run_sweep(spec, opts);
    std::cout << "sweep: " << r.completed << " completed, " << r.diverged << " diverged, "
              << r.crashed << " crashed, " << r.interrupted << " not finished, " << r.skipped
              << " finished before";
    if (spec.early_stop.asha)
      std::cout << ", " << r.stopped << " stopped early (" << r.steps_saved << " steps saved)";
    std::cout << "\n";
    plot(contract, out);
    notes(contract);
    // The table itself, as in summary.md (up to its per-run section).
    const std::string md = read_file((fs::path(out) / "summary.md").string());
    const auto table = md.find("\n| scheme"), runs = md.find("\n## Runs");
    if (table != std::string::npos && runs != std::string::npos)
      std::cout << md.substr(table + 1, runs - table);
    std::cout << "table: " << out << "/summary.md\n";
    if (g_sweep_stop.load() > 0 || r.interrupted > 0) return 4;
    return r.crashed > 0 ? 5 : 0;
  };
}

}  // namespace normlab::cli
