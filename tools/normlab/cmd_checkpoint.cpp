// normlab checkpoint consolidate --checkpoint RUN_DIR/checkpoints/step-N --out NEW_RUN_DIR
//   joins a sharded (multi-rank FSDP) checkpoint into a whole one, written as the newest
//   checkpoint of NEW_RUN_DIR: `normlab train --resume --out NEW_RUN_DIR` then continues the
//   run on any number of ranks, and export/eval/analyze read it like any other.
// normlab checkpoint inspect --checkpoint DIR
//   prints the step, the world size it was written with and its files.
// normlab checkpoint verify --checkpoint DIR|RUN_DIR
//   checks every file of a checkpoint (of every checkpoint of a run folder) against the sizes
//   and CRC-32s in its state.json; exit 1 naming the corrupted file, 0 when all hold.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "command.h"
#include "fault.h"
#include "normlab/train/checkpoint.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"

namespace normlab::cli {

Runner setup_checkpoint(CLI::App& sub) {
  struct Options {
    std::string checkpoint, out;
    bool overwrite = false;
  };
  auto o = std::make_shared<Options>();
  sub.require_subcommand(1);
  CLI::App* cons = sub.add_subcommand(
      "consolidate",
      "join a sharded checkpoint's pieces into a whole checkpoint of a new run folder");
  cons->add_option("--checkpoint", o->checkpoint, "checkpoint folder (RUN_DIR/checkpoints/step-N)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cons->add_option("--out", o->out,
                   "the new run folder (must not hold checkpoints yet; a config.yaml there stops "
                   "it: docs/reliability.md)")
      ->required();
  cons->add_flag("--overwrite", o->overwrite, "replace a config.yaml in --out, whoever wrote it");
  CLI::App* insp = sub.add_subcommand("inspect", "step, world size and files of a checkpoint");
  insp->add_option("--checkpoint", o->checkpoint, "checkpoint folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  CLI::App* ver = sub.add_subcommand(
      "verify",
      "check a checkpoint's files (or every checkpoint of a run) against their checksums");
  ver->add_option("--checkpoint", o->checkpoint,
                  "checkpoint folder, or a run folder (all its checkpoints)")
      ->required()
      ->check(CLI::ExistingDirectory);
  return [o, cons, ver] {
    namespace fs = std::filesystem;
    if (ver->parsed()) {
      std::vector<std::string> dirs;
      if (fs::exists(fs::path(o->checkpoint) / "state.json")) {
        dirs.push_back(o->checkpoint);
      } else {
        if (!fs::is_directory(fs::path(o->checkpoint) / "checkpoints"))
          throw std::invalid_argument(
              o->checkpoint + ": neither a checkpoint folder nor a run folder with checkpoints");
        // The run's checkpoints (step-N); set-aside (step-N.corrupted) and temporary folders are
        // not.
        for (const auto& e : fs::directory_iterator(fs::path(o->checkpoint) / "checkpoints")) {
          const std::string name = e.path().filename().string();
          if (name.rfind("step-", 0) == 0 &&
              name.find_first_not_of("0123456789", 5) == std::string::npos &&
              fs::exists(e.path() / "state.json"))
            dirs.push_back(e.path().string());
        }
        std::sort(dirs.begin(), dirs.end());
        if (dirs.empty()) throw std::invalid_argument(o->checkpoint + ": no checkpoints");
      }
      int bad = 0;
      for (const std::string& dir : dirs) {
        try {
          const auto files = checkpoint_verify(dir);
          checkpoint_check_values(dir);  // finite weights and optimizer state
          if (files.empty())
            std::cout << dir << ": written without checksums: values checked, bytes not\n";
          else
            std::cout << dir << ": ok (" << files.size() << " files, values finite)\n";
        } catch (const std::exception& e) {
          std::cout << dir << ": CORRUPTED: " << e.what() << "\n";
          ++bad;
        }
      }
      return bad ? 1 : 0;
    }
    if (!cons->parsed()) {
      const Checkpoint c = checkpoint_load(o->checkpoint);
      std::cout << "step " << c.state.step << ", written by " << c.world
                << (c.world == 1 ? " process" : " ranks (sharded)") << ", " << c.state.tokens
                << " tokens\n";
      for (const auto& e : fs::directory_iterator(o->checkpoint))
        std::cout << "  " << e.path().filename().string() << "  "
                  << (e.is_regular_file() ? fs::file_size(e) : 0) << " bytes\n";
      return 0;
    }
    // The output contract (util/output_contract.h): before any work.
    check_output_path("--out", o->out, {{"--checkpoint", o->checkpoint}});
    if (checkpoint_latest(o->out))
      throw std::invalid_argument(
          o->out + " already holds checkpoints: choose a new run folder for the consolidated one");
    OutputFiles contract(o->out, "checkpoint consolidate", o->overwrite);
    contract.claim({"config.yaml"});
    const Checkpoint c = checkpoint_consolidate(o->checkpoint);
    fs::create_directories(o->out);
    contract.keep_previous();
    write_file_atomic((fs::path(o->out) / "config.yaml").string(),
                      [&](FileWriter& w) { w.write(c.config_yaml); });
    contract.record({"config.yaml"});
    for (const std::string& note : contract.notes())
      std::cerr << "normlab checkpoint consolidate: note: " << note << "\n";
    const std::unique_ptr<WriteFault> fault =
        write_fault(environment_fault(), "checkpoint");  // tests only (fault.h)
    const std::string dir = checkpoint_save(o->out, c, 1, fault.get());
    std::cout << "consolidated " << c.world << " -> " << dir << " (" << c.model.size()
              << " parameters); continue with "
              << "`normlab train --config " << (fs::path(o->out) / "config.yaml").string()
              << " --out " << o->out << " --resume` on any number of ranks\n";
    return 0;
  };
}

}  // namespace normlab::cli
