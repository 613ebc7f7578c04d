// normlab compare --config A.yaml --against B.yaml [--map FILE]: the two models on the same
// weights (B gets A's by name, or through the map), run in float64 on one batch; prints the
// largest relative difference of the logits, the loss and every shared gradient
// (include/normlab/testing/equivalence.h, docs/schemes.md).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "normlab/config/config_io.h"
#include "normlab/eval/info.h"
#include "normlab/testing/equivalence.h"
#include "normlab/util/device.h"

namespace normlab::cli {
namespace {

struct CompareOptions {
  std::string config, against, map;
  std::vector<std::string> set_a, set_b;
  equivalence::EquivalenceOptions run;
  bool same_gains = false;
  bool verdict = false;      // --max-rel given
  std::string max_rel_text;  // --max-rel as given
};

// --max-rel: a positive, finite number, checked before any work (a bound of 0, a negative or
// a NaN one would turn every verdict into DIFFERENT, or into EQUIVALENT, whatever the models).
double parse_max_rel(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v <= 0.0)
    throw ConfigError("--max-rel '" + text +
                      "': must be a positive, finite number (a bound on the worst relative "
                      "difference, e.g. 1e-10)");
  return v;
}

int run_compare(const CompareOptions& o) {
  const double max_rel = o.verdict ? parse_max_rel(o.max_rel_text) : -1.0;
  const RunConfig a = config_load(o.config, o.set_a);
  const RunConfig b = config_load(o.against, o.set_b);
  const equivalence::WeightMap map =
      o.map.empty() ? equivalence::WeightMap{} : equivalence::WeightMap::load(o.map);
  equivalence::EquivalenceOptions run = o.run;
  run.random_gains = !o.same_gains;
  if (run.batch < 1 || run.seq_len < 1)
    throw ConfigError("--batch and --seq-len must be at least 1");
  // Both models live in float64 on the CPU with their gradients: a model that cannot fit stops
  // here naming its key, not in an allocation.
  const double capacity = device_capacity_bytes(torch::kCPU);
  for (const RunConfig* c : {&a, &b})
    require_model_fits(c->model, 16.0, 1.0, capacity, "cpu", "its float64 weights and gradients");
  const equivalence::EquivalenceReport r = equivalence::compare_configs(a.model, b.model, map, run);
  std::cout << "A: " << o.config << "\nB: " << o.against << "\n";
  if (!o.map.empty()) std::cout << "map: " << o.map << "\n";
  std::cout << r;
  if (o.verdict) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.3e %s %.3e", r.worst(), r.worst() <= max_rel ? "<=" : ">",
                  max_rel);
    const bool ok = r.worst() <= max_rel;
    std::cout << (ok ? "EQUIVALENT" : "DIFFERENT") << ": worst " << buf << " (--max-rel)\n";
    return ok ? 0 : 3;
  }
  return 0;
}

}  // namespace

Runner setup_compare(CLI::App& sub) {
  auto o = std::make_shared<CompareOptions>();
  sub.add_option("--config", o->config, "model A's run configuration (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--against", o->against, "model B's run configuration (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  sub.add_option("--map", o->map,
                 "weight map: 'A_PATTERN -> B_PATTERN', 'a: PATTERN = VALUE', 'b: PATTERN = VALUE' "
                 "lines (docs/schemes.md); default: every parameter by its name")
      ->check(CLI::ExistingFile);
  sub.add_option("--set", o->set_a, "override a key of A: section.key=value (repeatable)");
  sub.add_option("--set-against", o->set_b, "override a key of B (repeatable)");
  sub.add_option("--seed", o->run.seed, "seed of both models' init and of the batch")
      ->capture_default_str();
  sub.add_option("--batch", o->run.batch, "sequences in the batch")->capture_default_str();
  sub.add_option("--seq-len", o->run.seq_len, "tokens per sequence")->capture_default_str();
  sub.add_flag("--init-gains", o->same_gains,
               "keep A's 1-D parameters at their init (default: drawn from U(0.5, 1.5))");
  CLI::Option* max_rel =
      sub.add_option("--max-rel", o->max_rel_text,
                     "print EQUIVALENT or DIFFERENT against this bound on the worst relative "
                     "difference (a positive, finite number); exit code 3 when it is exceeded");
  return [o, max_rel] {
    o->verdict = max_rel->count() > 0;
    return run_compare(*o);
  };
}

}  // namespace normlab::cli
