// normlab import --from olmo|hf --checkpoint FILE_OR_DIR --config X.yaml [--set k=v ...] --out
// RUN_DIR
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "command.h"
#include "normlab/config/config_io.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/hf_import.h"
#include "normlab/train/olmo_checkpoint.h"
#include "normlab/util/error.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"
#include "python_tool.h"

namespace normlab::cli {
namespace fs = std::filesystem;

namespace {

// A .pt state dict (the file, or a folder's model.pt when it has no safetensors) converted by
// tools/olmo_checkpoint.py into `tmp`; other paths are read as they are.
std::string safetensors_source(const std::string& checkpoint, const std::string& tmp) {
  std::string pt;
  if (fs::path(checkpoint).extension() == ".pt") {
    pt = checkpoint;
  } else if (fs::is_directory(checkpoint) && fs::exists(fs::path(checkpoint) / "model.pt")) {
    bool has_safetensors = false;
    for (const auto& e : fs::directory_iterator(checkpoint))
      has_safetensors = has_safetensors || e.path().extension() == ".safetensors";
    if (!has_safetensors) pt = (fs::path(checkpoint) / "model.pt").string();
  }
  if (pt.empty()) return checkpoint;
  if (!fs::exists(pt)) throw CheckpointError(pt + ": no such file");
  if (!run_python_tool("olmo_checkpoint.py", {"to-safetensors", pt, tmp}, "import",
                       "torch and safetensors in the project's Python (tools/setup.sh)"))
    throw CheckpointError(pt + ": could not read it with tools/olmo_checkpoint.py");
  return tmp;
}

}  // namespace

Runner setup_import(CLI::App& sub) {
  struct Options {
    std::string from, checkpoint, config, out;
    std::vector<std::string> overrides;
    int64_t step = 0;
    bool overwrite = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--from", o->from,
                 "the checkpoint's origin: olmo (the official SiameseNorm code) or hf (a Hugging "
                 "Face save_pretrained folder of LlamaForCausalLM, OlmoeForCausalLM or "
                 "Olmo2ForCausalLM)")
      ->required()
      ->check(CLI::IsMember({"olmo", "hf"}));
  sub.add_option("--checkpoint", o->checkpoint,
                 "olmo: a state dict, .safetensors or torch.save .pt file, or a folder holding "
                 "model.safetensors or model.pt; hf: the folder of config.json and the "
                 "safetensors weights")
      ->required()
      ->check(CLI::ExistingPath);
  sub.add_option("--config", o->config,
                 "run configuration (YAML); olmo: its model section is the checkpoint's model; hf: "
                 "config.json gives the model section")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--set", o->overrides,
                 "override a key: section.key=value (repeatable, applied in order)");
  sub.add_option("--out", o->out,
                 "the run folder to write (config.yaml, checkpoints/step-N); a config.yaml "
                 "there stops it (docs/reliability.md)")
      ->required();
  sub.add_flag("--overwrite", o->overwrite, "replace a config.yaml in --out, whoever wrote it");
  sub.add_option("--step", o->step, "the training step the checkpoint is at (default 0)");
  return [o] {
    const bool hf = o->from == "hf";
    RunConfig cfg = config_load(o->config, o->overrides);
    // Before any conversion: the model the checkpoint holds, or a refusal.
    if (hf)
      cfg = hf_run_config(o->checkpoint, cfg);
    else
      olmo_check_config(cfg.model);
    // The output contract (util/output_contract.h): before any conversion.
    check_output_path("--out", o->out, {{"--checkpoint", o->checkpoint}, {"--config", o->config}});
    if (checkpoint_latest(o->out))
      throw CheckpointError(o->out + " already holds checkpoints: choose another --out");
    OutputFiles contract(o->out, "import", o->overwrite);
    contract.claim({"config.yaml"});
    const std::string tmp = (fs::temp_directory_path() /
                             ("normlab-import-" + std::to_string(::getpid()) + ".safetensors"))
                                .string();
    std::string ckpt;
    try {
      const std::string source = hf ? o->checkpoint : safetensors_source(o->checkpoint, tmp);
      contract.keep_previous();  // the import writes config.yaml by a rename
      ckpt =
          hf ? hf_import(source, cfg, o->out, o->step) : olmo_import(source, cfg, o->out, o->step);
      contract.record({"config.yaml"});
    } catch (...) {
      fs::remove(tmp);
      throw;
    }
    fs::remove(tmp);
    for (const std::string& note : contract.notes())
      std::cerr << "normlab import: note: " << note << "\n";
    std::cout << "imported " << o->checkpoint << " into " << ckpt << "\n";
    return 0;
  };
}

}  // namespace normlab::cli
