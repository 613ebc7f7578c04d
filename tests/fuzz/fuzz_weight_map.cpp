// Fuzz target: the weight map of `normlab compare --map` (weight_map.h). The input is a map's
// text: either rejected with ConfigError, or every rule it gives is well formed: non-empty
// patterns without spaces or "**", the same number of '*' on both sides of a rename, a held
// value that is finite or `init`, and each pattern matches the name made by writing "x" for
// its '*'s, with one matched run per star (what a rename copies across).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "normlab/testing/weight_map.h"
#include "normlab/util/error.h"

namespace {

void require_matches_itself(const std::string& pattern) {
  if (pattern.empty() || pattern.find_first_of(" \t") != std::string::npos ||
      pattern.find("**") != std::string::npos)
    std::abort();
  std::string name;
  size_t stars = 0;
  for (const char c : pattern) {
    name += c == '*' ? "x" : std::string(1, c);
    stars += c == '*';
  }
  std::vector<std::string> got;
  if (!normlab::equivalence::pattern_matches(pattern, name, &got) || got.size() != stars)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab::equivalence;
  const std::string text(reinterpret_cast<const char*>(data), size);
  WeightMap map;
  try {
    map = WeightMap::parse(text, "fuzz.map");
  } catch (const normlab::ConfigError&) {
    return 0;
  }
  for (const WeightMap::Rule& r : map.rules) {
    if (r.origin.rfind("fuzz.map:", 0) != 0) std::abort();
    require_matches_itself(r.pattern);
    if (r.kind == WeightMap::Kind::Rename) {
      require_matches_itself(r.target);
      size_t a = 0, b = 0;
      for (const char c : r.pattern) a += c == '*';
      for (const char c : r.target) b += c == '*';
      if (a != b) std::abort();
    } else if (r.value && !std::isfinite(*r.value)) {
      std::abort();
    }
  }
  return 0;
}
