// normlab config: the resolved configuration of a run, or the reference of every key.
#include <iostream>

#include "command.h"
#include "normlab/config/config_io.h"

namespace normlab::cli {

Runner setup_config(CLI::App& sub) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    bool reference = false;
  };
  auto o = std::make_shared<Options>();
  sub.add_option("--config", o->config, "run configuration (YAML); without it: the defaults");
  sub.add_option("--set", o->overrides, "override a key: section.key=value (repeatable)");
  sub.add_flag("--reference", o->reference,
               "print the markdown table of every key (docs/config.md)");
  return [o] {
    if (o->reference) {
      std::cout << config_reference_markdown();
    } else {
      std::cout << config_to_yaml(config_load(o->config, o->overrides));
    }
    return 0;
  };
}

}  // namespace normlab::cli
