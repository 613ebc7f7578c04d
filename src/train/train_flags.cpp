// The command line of `normlab train` from TrainArgs (train_flags.h).
#include "normlab/train/train_flags.h"

namespace normlab {

std::vector<std::string> train_command(const TrainArgs& a) {
  namespace f = train_flags;
  std::vector<std::string> argv = {f::kCommand, f::kConfig.name, a.config};
  for (const auto& s : a.overrides) argv.insert(argv.end(), {f::kSet.name, s});
  if (!a.out.empty()) argv.insert(argv.end(), {f::kOut.name, a.out});
  if (a.resume) argv.push_back(f::kResume.name);
  if (!a.init_from.empty()) argv.insert(argv.end(), {f::kInitFrom.name, a.init_from});
  if (a.stop_after > 0) argv.insert(argv.end(), {f::kStopAfter.name, std::to_string(a.stop_after)});
  if (a.no_plots) argv.push_back(f::kNoPlots.name);
  if (a.overwrite) argv.push_back(f::kOverwrite.name);
  return argv;
}

}  // namespace normlab
