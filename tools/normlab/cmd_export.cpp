// normlab export --checkpoint DIR --out FOLDER
#include <iostream>

#include "command.h"
#include "fault.h"
#include "normlab/train/export.h"

namespace normlab::cli {

Runner setup_export(CLI::App& sub) {
  auto ckpt = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  sub.add_option("--checkpoint", *ckpt,
                 "checkpoint folder, or a run folder (its newest checkpoint)")
      ->required();
  sub.add_option("--out", *out, "export folder: model.safetensors, config.json, tokenizer.model")
      ->required();
  return [ckpt, out] {
    const std::unique_ptr<WriteFault> fault =
        write_fault(environment_fault(), "export");  // tests only (fault.h)
    const std::string from = export_model(*ckpt, *out, fault.get());
    std::cout << "exported " << from << " to " << *out << "\n";
    return 0;
  };
}

}  // namespace normlab::cli
