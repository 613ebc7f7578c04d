// normlab train --config X.yaml [--set k=v ...] [--out RUN_DIR] [--resume] [--init-from W]
// SIGINT/SIGTERM: the first one finishes the current step, saves a checkpoint and exits with
// code 4 (resumable), and says so in one line on stderr; a second one ends the process at once
// (checkpoints are atomic). They are taken by a waiter thread, never by a handler on a thread
// that computes (stop_signals.h).
// NORMLAB_CPU_ALLOCATOR=system keeps LibTorch's own CPU allocator instead of the caching one
// (sanitizer builds do so by default: a cache that hands a freed block out again at once hides
// a use after free from AddressSanitizer).
// Under mpirun, srun or torchrun every process runs this with the same arguments: the
// launcher's variables make it one rank of an FSDP run (docs/distributed.md).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

#include "command.h"
#include "fault.h"
#include "normlab/config/config_io.h"
#include "normlab/distributed/communicator.h"
#include "normlab/nn/model.h"
#include "normlab/train/run_folder.h"
#include "normlab/train/train_flags.h"
#include "normlab/train/trainer.h"
#include "normlab/util/cpu_allocator.h"
#include "normlab/util/device.h"
#include "normlab/util/error.h"
#include "normlab/util/file_io.h"
#include "normlab/util/library_error.h"
#include "normlab/util/log.h"
#include "normlab/util/output_contract.h"
#include "python_tool.h"
#include "stop_signals.h"

#include <torch/cuda.h>

namespace normlab::cli {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr const char* kDefaultAllocator = "system";
#else
constexpr const char* kDefaultAllocator = "caching";
#endif

// NORMLAB_CPU_ALLOCATOR: caching (the default) or system.
bool caching_allocator_wanted(const std::map<std::string, std::string>& env) {
  const auto it = env.find("NORMLAB_CPU_ALLOCATOR");
  const std::string v = it == env.end() || it->second.empty() ? kDefaultAllocator : it->second;
  if (v != "caching" && v != "system")
    throw ConfigError("NORMLAB_CPU_ALLOCATOR='" + v + "': expected caching or system");
  return v == "caching";
}

std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace

Runner setup_train(CLI::App& sub) {
  namespace f = train_flags;
  auto o = std::make_shared<TrainArgs>();
  sub.add_option(f::kConfig.name, o->config, f::kConfig.help)->required()->check(CLI::ExistingFile);
  sub.add_option(f::kSet.name, o->overrides, f::kSet.help);
  CLI::Option* out_flag = sub.add_option(f::kOut.name, o->out, f::kOut.help);
  sub.add_flag(f::kResume.name, o->resume, f::kResume.help);
  sub.add_option(f::kInitFrom.name, o->init_from, f::kInitFrom.help)->check(CLI::ExistingPath);
  sub.add_option(f::kStopAfter.name, o->stop_after, f::kStopAfter.help);
  sub.add_flag(f::kNoPlots.name, o->no_plots, f::kNoPlots.help);
  sub.add_flag(f::kOverwrite.name, o->overwrite, f::kOverwrite.help);
  sub.footer(
      "Exit codes: 0 completed, 1 error, 3 diverged (non-finite loss or gradient), 4 interrupted "
      "(checkpoint saved).");
  return [o, out_flag] {
    const RunConfig cfg =
        config_load(o->config, o->overrides);  // all config errors before any work
    check_fault_target(environment_fault(), cfg.model.n_layers);  // tests only (fault.h)
    std::string out = o->out;
    if (out.empty() && out_flag->count() == 0)
      out = "runs/" + std::filesystem::path(o->config).stem().string() + "-" +
            std::string(enum_name(cfg.model.scheme));
    // The output contract (util/output_contract.h, train/run_folder.h): before any file opens.
    check_output_path(f::kOut.name, out,
                      {{f::kConfig.name, o->config}, {f::kInitFrom.name, o->init_from, true}});
    const std::map<std::string, std::string> vars = environment();
    const DistEnv env = dist_env_from(vars);
    // Rank 0 alone: the other ranks start while it writes the folder's files.
    const std::vector<std::string> set_aside =
        env.rank == 0 ? prepare_run_folder(out, cfg, o->resume, o->overwrite, !o->no_plots)
                      : std::vector<std::string>{};
    // Before any thread exists: every thread started later inherits the blocked signals.
    const StopSignals& signals =
        StopSignals::start(env.world > 1 ? "rank " + std::to_string(env.rank) + " of " +
                                               std::to_string(env.world) + ": "
                                         : "");
    const bool caching = caching_allocator_wanted(vars);
    std::filesystem::create_directories(out);
    // Rank 0 logs to the console and train.log; the other ranks only their errors.
    Logger log = env.rank == 0 ? Logger("train", log_level_from_string(cfg.logging.level),
                                        (std::filesystem::path(out) / "train.log").string())
                               : Logger("train.rank" + std::to_string(env.rank), LogLevel::Error);
    // CPU tensors of a step are reallocated with the same sizes every step: reuse them
    // instead of returning them to the kernel (docs/training.md, "Speed").
    // Never destroyed: tensors freed during static destruction at exit still return to it.
    if (caching) {
      static auto* cpu_allocator = new CpuCachingAllocator();
      cpu_allocator->install();
    }
    // The first line of train.log where a fault is injected (tests only, fault.h).
    if (const std::string notice = fault_notice(environment_fault()); !notice.empty())
      log.warn(notice);
    for (const std::string& line : set_aside) log.info(line);
    TrainOptions opts;
    opts.run_dir = out;
    opts.resume = o->resume;
    opts.init_from = o->init_from;
    opts.stop = signals.flag();
    opts.stop_after = o->stop_after;
    opts.logger = &log;
    const std::unique_ptr<WriteFault> checkpoint_fault =
        write_fault(environment_fault(), "checkpoint");  // tests only (fault.h)
    opts.checkpoint_fault = checkpoint_fault.get();
    opts.after_step =
        step_fault(environment_fault(), [&signals](int sig) { signals.raise_and_wait(sig); });
    const std::unique_ptr<ForwardHooks> forward_hooks = forward_fault(environment_fault());
    opts.forward_hooks = forward_hooks.get();
    opts.onednn_max_isa = onednn_max_isa_from_environment();
    std::unique_ptr<Communicator> comm;
    RunSummary s;
    try {
      CommOptions co;
      co.backend = cfg.distributed.backend;
      co.timeout = std::chrono::seconds(cfg.distributed.timeout_seconds);
      co.engine_for_one = cfg.distributed.force_fsdp;
      const torch::Device device = resolve_device(cfg.train.device, gpu_placement(env));
      comm = make_communicator(env, co, device);
      opts.comm = comm.get();
      opts.device_index = device.is_cuda() ? device.index() : -1;
      s = train(cfg, opts);
    } catch (const std::exception& e) {
      // A LibTorch error: one line for the user (main prints it), its backtrace in train.log.
      if (const auto* le = dynamic_cast<const LibraryError*>(&e))
        log.error_to_file(le->from_torch()
                              ? "LibTorch error in " + le->doing() + ", with its backtrace:\n" +
                                    le->backtrace()
                              : "unexpected error in " + le->doing() + ": " + le->backtrace());
      if (env.world == 1) throw;
      // One rank failing must end the job: exit without finalizing the engine (a finalize would
      // wait for peers that are blocked in a collective); the launcher stops the others.
      // One write, so that the lines of ranks failing together do not interleave.
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);  // without its backtrace
      std::cerr << ("normlab train: rank " + std::to_string(env.rank) + " of " +
                    std::to_string(env.world) + ": error: " +
                    (c10_error ? one_line(c10_error->what_without_backtrace()) : e.what()) + "\n")
                << std::flush;
      std::_Exit(1);
    }
    if (env.rank != 0) return exit_code(s.status);
    std::cout << "run " << enum_name(s.status) << " after " << s.steps << " steps";
    if (s.diverged_at >= 0) std::cout << " (diverged at step " << s.diverged_at << ")";
    if (s.val_perplexity >= 0)
      std::cout << ": validation loss " << s.final_val_loss << ", perplexity " << s.val_perplexity;
    std::cout << "\noutputs: " << out << "/ (summary.json, metrics.jsonl, train.log, checkpoints/"
              << (cfg.diagnostics.every > 0 ? ", diagnostics.jsonl" : "") << ")\n";
    if (cfg.diagnostics.every > 0 && !o->no_plots) {
      signals.unblock();  // the plotting child stops on Ctrl-C like any other
      run_python_tool("plot_diagnostics.py",
                      {(std::filesystem::path(out) / "diagnostics.jsonl").string(), out}, "plots");
    }
    return exit_code(s.status);
  };
}

}  // namespace normlab::cli
