// normlab export --checkpoint DIR --out FOLDER [--format normlab|hf|olmo] [--tokenizer MODEL]
//                [--pt]
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "command.h"
#include "fault.h"
#include "normlab/train/export.h"
#include "normlab/train/export_hf.h"
#include "normlab/train/olmo_checkpoint.h"
#include "normlab/util/error.h"
#include "normlab/util/file_io.h"
#include "normlab/util/output_contract.h"
#include "python_tool.h"

namespace normlab::cli {
namespace {

// Files of a format's export that this export did not write (no tokenizer recorded, no --pt)
// but an earlier one left in the folder: kept, as every file not written is, but said, since
// a reader of the folder takes them as part of the export.
void warn_kept_files(const std::string& out, const std::string& format,
                     const std::vector<std::string>& written) {
  const std::vector<std::string> optional =
      format == "hf"
          ? std::vector<std::string>{"tokenizer.model", "tokenizer.json", "tokenizer_config.json"}
      : format == "olmo" ? std::vector<std::string>{"model.pt"}
                         : std::vector<std::string>{"tokenizer.model", "tokenizer.json"};
  for (const std::string& name : optional)
    if (std::find(written.begin(), written.end(), name) == written.end() &&
        std::filesystem::exists(std::filesystem::path(out) / name))
      std::cerr << "normlab export: note: " << (std::filesystem::path(out) / name).string()
                << " is from before (this export does not write it) and was kept\n";
}

// The files a format's export always writes (the tokenizer's only when one is recorded).
std::vector<std::string> surely_written(const std::string& format, bool pt) {
  if (format == "olmo")
    return pt ? std::vector<std::string>{"model.safetensors", "normlab_config.yaml", "model.pt"}
              : std::vector<std::string>{"model.safetensors", "normlab_config.yaml"};
  if (format == "hf")
    return {"model.safetensors", "config.json", "generation_config.json", "modeling_normlab.py",
            "configuration_normlab.py"};
  return {"model.safetensors", "config.json"};
}

}  // namespace

Runner setup_export(CLI::App& sub) {
  struct Options {
    std::string checkpoint, out, format = "normlab", tokenizer;
    bool pt = false, overwrite = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--checkpoint", o->checkpoint,
                 "checkpoint folder, or a run folder (its newest checkpoint); with --format hf "
                 "also a normlab export folder")
      ->required();
  sub.add_option("--out", o->out,
                 "export folder, new or existing: every other file (.git, README.md, ...) stays; "
                 "an earlier export's file of a name it writes is kept as NAME.prev, and any "
                 "other file of such a name stops it (docs/reliability.md)")
      ->required();
  sub.add_flag("--overwrite", o->overwrite,
               "replace the files of the names the export writes, whoever wrote them");
  sub.add_option("--format", o->format,
                 "normlab (model.safetensors, config.json, tokenizer.model), hf (Hugging Face "
                 "transformers, trust_remote_code) or olmo (the official SiameseNorm code's "
                 "names: model.safetensors, normlab_config.yaml; siamese_hybrid only); "
                 "docs/interop.md")
      ->capture_default_str()
      ->check(CLI::IsMember({"normlab", "hf", "olmo"}));
  sub.add_option(
      "--tokenizer", o->tokenizer,
      "with --format hf: the tokenizer to ship, a SentencePiece model or a tokenizer.json "
      "(default: the run's)");
  sub.add_flag("--pt", o->pt,
               "with --format olmo: also model.pt (torch.save of the state dict, through "
               "tools/olmo_checkpoint.py)");
  return [o] {
    if (o->pt && o->format != "olmo") throw ConfigError("--pt needs --format olmo");
    if (!o->tokenizer.empty() && o->format != "hf")
      throw ConfigError("export: --tokenizer goes with --format hf");
    // The output contract (util/output_contract.h): before any work.
    check_output_path(
        "--out", o->out,
        {{"--checkpoint", o->checkpoint, /*may_contain_out=*/true}, {"--tokenizer", o->tokenizer}});
    OutputFiles contract(o->out, "export", o->overwrite);
    contract.claim(surely_written(o->format, o->pt));  // the optional ones when committed
    const std::unique_ptr<WriteFault> fault =
        write_fault(environment_fault(), "export");  // tests only (fault.h)
    std::vector<std::string> written;
    const std::string from =
        o->format == "olmo" ? olmo_export(o->checkpoint, o->out, &written, &contract)
        : o->format == "hf"
            ? export_model_hf(o->checkpoint, o->out, o->tokenizer, &written, &contract)
            : export_model(o->checkpoint, o->out, fault.get(), &written, &contract);
    if (o->pt) {
      const std::string st = (std::filesystem::path(o->out) / "model.safetensors").string();
      const std::string pt = (std::filesystem::path(o->out) / "model.pt").string();
      contract.keep_previous(/*by_link=*/false, {"model.pt"});  // torch.save writes in place
      if (!run_python_tool("olmo_checkpoint.py", {"to-pt", st, pt}, "model.pt",
                           "torch and safetensors in the project's Python (tools/setup.sh)"))
        throw CheckpointError(pt + ": not written (tools/olmo_checkpoint.py failed)");
      written.push_back("model.pt");
      contract.record({"model.pt"});
    }
    for (const std::string& note : contract.notes())
      std::cerr << "normlab export: note: " << note << "\n";
    warn_kept_files(o->out, o->format, written);
    std::cout << "exported " << from << " to " << o->out << " (" << o->format << ")\n";
    return 0;
  };
}

}  // namespace normlab::cli
