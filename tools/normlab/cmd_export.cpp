// normlab export --checkpoint DIR --out FOLDER [--format normlab|hf] [--tokenizer MODEL]
#include <iostream>

#include "command.h"
#include "normlab/train/export.h"
#include "normlab/train/export_hf.h"
#include "normlab/util/error.h"

namespace normlab::cli {

Runner setup_export(CLI::App& sub) {
  auto ckpt = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("normlab");
  auto tokenizer = std::make_shared<std::string>();
  sub.add_option("--checkpoint", *ckpt,
                 "checkpoint folder, or a run folder (its newest checkpoint); with --format hf "
                 "also a normlab export folder")
      ->required();
  sub.add_option("--out", *out, "export folder: model.safetensors, config.json, tokenizer.model")
      ->required();
  sub.add_option("--format", *format,
                 "normlab (normlab's own folder) or hf (Hugging Face transformers, "
                 "trust_remote_code; docs/interop.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"normlab", "hf"}));
  sub.add_option("--tokenizer", *tokenizer,
                 "with --format hf: the SentencePiece model to ship (default: the run's)");
  return [ckpt, out, format, tokenizer] {
    if (!tokenizer->empty() && *format != "hf")
      throw ConfigError("export: --tokenizer goes with --format hf");
    const std::string from =
        *format == "hf" ? export_model_hf(*ckpt, *out, *tokenizer) : export_model(*ckpt, *out);
    std::cout << "exported " << from << " to " << *out << "\n";
    return 0;
  };
}

}  // namespace normlab::cli
