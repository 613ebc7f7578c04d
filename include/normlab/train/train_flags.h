// The command line of `normlab train`, declared once: the CLI's train command registers these
// flags and parses into TrainArgs, and a sweep builds its children's command lines with
// train_command (sweep.h, point_command), so the two cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace normlab {

/// One flag: its name on the command line and its help text.
struct TrainFlag {
  const char* name;
  const char* help;
};

namespace train_flags {
inline constexpr const char* kCommand = "train";  // the subcommand
inline constexpr TrainFlag kConfig{"--config", "run configuration (YAML)"};
inline constexpr TrainFlag kSet{"--set",
                                "override a key: section.key=value (repeatable, applied in order)"};
inline constexpr TrainFlag kOut{"--out", "run folder (default: runs/<config name>-<scheme>)"};
inline constexpr TrainFlag kResume{"--resume", "continue from the run folder's newest checkpoint"};
inline constexpr TrainFlag kInitFrom{
    "--init-from",
    "initial weights: a model.safetensors, or a checkpoint step or export folder holding one "
    "(names and shapes must match the config's model; a checkpoint found by --resume wins)"};
inline constexpr TrainFlag kStopAfter{
    "--stop-after", "checkpoint and stop after N steps of this invocation (exit 4)"};
inline constexpr TrainFlag kOverwrite{
    "--overwrite",
    "start afresh in a run folder that holds the files of an earlier run but no checkpoint "
    "(config.yaml, train.log, metrics.jsonl, ...), replacing them (docs/reliability.md)"};
inline constexpr TrainFlag kNoPlots{"--no-plots",
                                    "with diagnostics on: do not run tools/plot_diagnostics.py"};
}  // namespace train_flags

/// What a `normlab train` invocation is given.
struct TrainArgs {
  std::string config;                  // --config
  std::vector<std::string> overrides;  // --set, in order
  std::string out;                     // --out; "" = the default folder
  bool resume = false;                 // --resume
  std::string init_from;               // --init-from; "" = none
  int64_t stop_after = 0;              // --stop-after; 0 = none
  bool no_plots = false;               // --no-plots
  bool overwrite = false;              // --overwrite
};

/// `train --config C [--set S]... [--out O] [--resume] [--init-from W] [--stop-after N]
/// [--no-plots] [--overwrite]`: the arguments after the program's name, each flag only when set.
std::vector<std::string> train_command(const TrainArgs& args);

}  // namespace normlab
