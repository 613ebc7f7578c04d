// How a sweep starts the run of one point: the layer between the sweep's scheduling (which
// point runs next, early-stopping promotions, the reports: sweep.h) and what runs it, a local
// child process (make_local_launcher) or a Slurm job (slurm.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

/// One run to start: `normlab train ... --out DIR --resume` for point `point`.
struct RunStart {
  size_t point = 0;
  std::string name;               // the point's name (its run folder's name)
  std::string dir;                // the point's run folder
  std::vector<std::string> argv;  // the command
  std::vector<std::string> env;   // KEY=VALUE, its whole environment
  std::string console;            // where its stdout and stderr go (appended), locally
  int64_t target = 0;             // the step it runs to (a rung with early stopping, or the end)
};

/// A run that ended.
struct RunEnd {
  size_t point = 0;
  int exit_code = -1;  // the command's exit status; -1 when it did not exit by itself
  int signal = 0;      // the signal that ended it, when one did
  std::string state;   // the scheduler's final state (Slurm: COMPLETED, FAILED, ...); "" locally
  std::string log;     // where its output is
};

/// Starts runs, tells which ended, and passes a stop request on.
class RunLauncher {
 public:
  virtual ~RunLauncher() = default;
  /// Starts the run; returns how to find it ("pid 123", "Slurm job 45"). Throws on failure,
  /// naming the point.
  virtual std::string start(const RunStart& run) = 0;
  /// One run that ended since the last call, or none (after waiting a little).
  virtual std::optional<RunEnd> poll() = 0;
  /// 1: ask every run to stop with a checkpoint (SIGTERM, once); 2: end them outright.
  virtual void stop(int level) = 0;
  /// Runs an earlier sweep in the same folder started that still run (or wait to run): each
  /// point and the step it runs to. The launcher follows them as if it had started them.
  virtual std::vector<std::pair<size_t, int64_t>> attach() { return {}; }
  /// How the runs compute, for the sweep's first line ("on Slurm"); "" locally.
  virtual std::string where() const { return ""; }
};

/// Each run a child process (fork + execve) in its own process group that dies with the sweep.
std::unique_ptr<RunLauncher> make_local_launcher();

}  // namespace normlab
