// normlab schemes [--json]: the scheme table (include/normlab/nn/scheme_table.h), one row per
// scheme: its config name, whether it carries a second stream, whether its attention always
// normalises q/k/v, and the scheme its parameter overhead is counted against. The JSON form is
// for scripts that need the list of schemes (tests/reference/scheme_lists.py checks the Python
// lists against it).
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "normlab/nn/scheme.h"

namespace normlab::cli {

Runner setup_schemes(CLI::App& sub) {
  auto json = std::make_shared<bool>(false);
  sub.add_flag("--json", *json, "print a JSON list of objects (name, two_stream, qkv_norm, base)");
  return [json] {
    nlohmann::json rows = nlohmann::json::array();
    for (const Scheme s : enum_values<Scheme>())
      rows.push_back({{"name", std::string(enum_name(s))},
                      {"two_stream", scheme_is_two_stream(s)},
                      {"qkv_norm", scheme_forces_qkv_norm(s)},
                      {"base", std::string(enum_name(scheme_base(s)))}});
    if (*json) {
      std::cout << rows.dump(1) << "\n";
      return 0;
    }
    std::cout << "scheme            Y stream  qkv norms  base\n";
    for (const auto& r : rows) {
      const std::string name = r["name"];
      std::cout << name << std::string(name.size() < 18 ? 18 - name.size() : 1, ' ')
                << (r["two_stream"].get<bool>() ? "yes       " : "no        ")
                << (r["qkv_norm"].get<bool>() ? "always     " : "optional   ")
                << r["base"].get<std::string>() << "\n";
    }
    return 0;
  };
}

}  // namespace normlab::cli
