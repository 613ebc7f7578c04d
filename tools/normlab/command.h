// A `normlab` subcommand: `setup` declares its options on the CLI11 sub-app and returns the
// function that runs it once the command line is parsed. Every subcommand lives in its own
// cmd_<name>.cpp; the table of them is in main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace normlab::cli {

using Runner = std::function<int()>;  // returns the process exit code

struct Command {
  const char* name;
  const char* summary;
  Runner (*setup)(CLI::App& sub);
};

/// The oneDNN ISA limit of this process, as oneDNN reads it: ONEDNN_MAX_CPU_ISA, else
/// DNNL_MAX_CPU_ISA, else "" (util/cpu_class.h). Read in main.cpp, with the process's other
/// variables; the commands pass it on (TrainOptions::onednn_max_isa).
std::string onednn_max_isa_from_environment();

Runner setup_analyze(CLI::App& sub);
Runner setup_checkpoint(CLI::App& sub);
Runner setup_compare(CLI::App& sub);
Runner setup_config(CLI::App& sub);
Runner setup_data(CLI::App& sub);
Runner setup_eval(CLI::App& sub);
Runner setup_export(CLI::App& sub);
Runner setup_generate(CLI::App& sub);
Runner setup_import(CLI::App& sub);
Runner setup_info(CLI::App& sub);
Runner setup_mfu(CLI::App& sub);
Runner setup_schemes(CLI::App& sub);
Runner setup_sweep(CLI::App& sub);
Runner setup_tokenizer(CLI::App& sub);
Runner setup_train(CLI::App& sub);
Runner setup_version(CLI::App& sub);

}  // namespace normlab::cli
