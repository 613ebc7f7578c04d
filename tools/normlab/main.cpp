// The normlab command-line tool. Subcommands are declared in kCommands, one row each; their
// options and code live in cmd_<name>.cpp. Errors go to stderr with a non-zero exit code:
// 1 for a failed command, 2 for an unknown command, the CLI11 code (105, 106, ...) for a
// malformed command line. An error from LibTorch is one line too: what normlab was doing and
// LibTorch's message; its C++ backtrace goes to the run's train.log, and to the terminal with
// TORCH_SHOW_CPP_STACKTRACES=1.
#include <c10/util/Exception.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "command.h"
#include "fault.h"
#include "normlab/util/error.h"
#include "normlab/util/library_error.h"
#include "normlab/version.h"

namespace {

using normlab::cli::Command;

// clang-format off
const Command kCommands[] = {
  {"train",   "train a model from a YAML config (resumable; checkpoints, metrics, summary)", normlab::cli::setup_train},
  {"sweep",   "learning-rate sweeps over schemes and seeds: child runs, resumable, paper-style table and plots", normlab::cli::setup_sweep},
  {"analyze", "the paper's diagnostics on a checkpoint: stream norms, gradients, gains, logit lens, massive activations, pruning", normlab::cli::setup_analyze},
  {"eval",    "validation perplexity (per token and per byte) and zero-shot multiple-choice accuracy of a model", normlab::cli::setup_eval},
  {"generate", "continue a prompt with a trained model (temperature, top-k, top-p, KV cache)", normlab::cli::setup_generate},
  {"checkpoint", "join a sharded (multi-rank) checkpoint into a whole one (consolidate); show a checkpoint (inspect); check its checksums (verify)", normlab::cli::setup_checkpoint},
  {"export",  "export a checkpoint's model: model.safetensors, config.json, tokenizer", normlab::cli::setup_export},
  {"import",  "a checkpoint of the official SiameseNorm code (--from olmo) or a Hugging Face Llama, OLMoE or OLMo-2 (--from hf) as a normlab run folder", normlab::cli::setup_import},
  {"tokenizer", "train a SentencePiece tokenizer; encode and decode with one or a tokenizer.json", normlab::cli::setup_tokenizer},
  {"data",    "prepare token shards from text (data prepare), check them (data inspect)", normlab::cli::setup_data},
  {"info",    "parameters, FLOPs per token and memory per GPU of a configuration", normlab::cli::setup_info},
  {"compare", "two models on the same weights in float64: largest relative difference of the logits and of every gradient", normlab::cli::setup_compare},
  {"schemes", "the normalization schemes of the scheme table (--json for scripts)", normlab::cli::setup_schemes},
  {"mfu",     "model FLOPs utilisation of timed steps: warm-up left out, mean and spread, peak by GPU name", normlab::cli::setup_mfu},
  {"config",  "print a run's resolved configuration, or the reference of every key", normlab::cli::setup_config},
  {"version", "print normlab's and LibTorch's versions and the devices seen", normlab::cli::setup_version},
};
// clang-format on

// TORCH_SHOW_CPP_STACKTRACES=1: LibTorch's C++ backtraces on the terminal too.
bool show_backtraces() {
  const char* v = std::getenv("TORCH_SHOW_CPP_STACKTRACES");
  return v && std::string(v) == "1";
}

}  // namespace

namespace normlab::cli {

std::string onednn_max_isa_from_environment() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "";
}

}  // namespace normlab::cli

int main(int argc, char** argv) {
  CLI::App app{"normlab " NORMLAB_VERSION_STRING
               ": pre-training language models with the normalization placement at the centre",
               "normlab"};
  app.require_subcommand(1);
  app.footer("Run 'normlab <command> --help' for a command's options.");

  std::vector<std::pair<CLI::App*, normlab::cli::Runner>> runners;
  for (const Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    runners.emplace_back(sub, c.setup(*sub));
  }

  // An unknown first word is a mistyped command: say so, and list the commands.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    bool known = false;
    std::string names;
    for (const Command& c : kCommands) {
      known = known || word == c.name;
      names += (names.empty() ? "" : ", ") + std::string(c.name);
    }
    if (!known) {
      std::cerr << "normlab: unknown command '" << word << "' (commands: " << names << ")\n";
      return 2;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // --help goes to stdout with code 0; errors to stderr
  }
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    // Errors (util/error.h): the kind of an Error, then what it says; exit code 1 either way.
    try {
      // NORMLAB_FAULT (tests only, fault.h): a bad value stops here; an active one is said first.
      const std::string notice = normlab::cli::fault_notice(normlab::cli::environment_fault());
      if (!notice.empty()) std::cerr << "normlab " << sub->get_name() << ": " << notice << "\n";
      return run();
    } catch (const normlab::Error& e) {
      std::cerr << "normlab " << sub->get_name() << ": " << e.kind() << " error: " << e.what()
                << "\n";
      // A LibTorch error's backtrace: in the run's log (normlab train), on the terminal on request.
      const auto* le = dynamic_cast<const normlab::LibraryError*>(&e);
      if (le && show_backtraces()) std::cerr << le->backtrace() << "\n";
      return 1;
    } catch (const c10::Error& e) {  // from LibTorch, where normlab named no context
      std::cerr << "normlab " << sub->get_name()
                << ": LibTorch error: " << normlab::one_line(e.what_without_backtrace()) << "\n";
      if (show_backtraces()) std::cerr << e.what() << "\n";
      return 1;
    } catch (const std::exception& e) {  // from anywhere normlab named no context
      std::cerr << "normlab " << sub->get_name() << ": error: " << normlab::one_line(e.what())
                << "\n";
      return 1;
    }
  }
  return 1;  // unreachable: require_subcommand(1)
}
