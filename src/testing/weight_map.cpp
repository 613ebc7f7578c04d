// WeightMap (include/normlab/testing/weight_map.h): the rules, their text form and the name
// patterns.
#include "normlab/testing/weight_map.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/util/error.h"

namespace normlab::equivalence {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

size_t count_stars(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '*';
  return n;
}

void check_pattern(const std::string& pattern, const std::string& origin) {
  if (pattern.empty()) throw ConfigError(origin + ": empty parameter pattern");
  for (char c : pattern)
    if (c == ' ' || c == '\t')
      throw ConfigError(origin + ": '" + pattern + "': a parameter pattern has no spaces");
  if (pattern.find("**") != std::string::npos)
    throw ConfigError(origin + ": '" + pattern + "': '**' is not a pattern ('*' is one name part)");
}

HeldValue parse_value(const std::string& text, const std::string& origin) {
  if (text == "init") return kInit;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);  // overflow gives inf: refused below
  if (text.empty() || end != text.c_str() + text.size() ||
      std::isspace(static_cast<unsigned char>(text[0])))
    throw ConfigError(origin + ": value '" + text + "' is neither a number nor 'init'");
  if (!std::isfinite(v))
    throw ConfigError(origin + ": value '" + text + "' is not a finite number");
  return v;
}

// Parses one non-empty, comment-free line into a rule.
WeightMap::Rule parse_line(const std::string& line, const std::string& origin) {
  WeightMap::Rule r;
  r.origin = origin;
  if (line.rfind("a:", 0) == 0 || line.rfind("b:", 0) == 0) {
    r.kind = line[0] == 'a' ? WeightMap::Kind::HoldA : WeightMap::Kind::HoldB;
    const std::string rest = line.substr(2);
    const auto eq = rest.find('=');
    if (eq == std::string::npos)
      throw ConfigError(origin + ": '" + line + "': expected '" + line.substr(0, 2) +
                        " PATTERN = VALUE'");
    r.pattern = trim(rest.substr(0, eq));
    r.value = parse_value(trim(rest.substr(eq + 1)), origin);
    check_pattern(r.pattern, origin);
    return r;
  }
  const auto arrow = line.find("->");
  if (arrow == std::string::npos)
    throw ConfigError(origin + ": '" + line +
                      "': expected 'A_PATTERN -> B_PATTERN', 'a: PATTERN = VALUE' or "
                      "'b: PATTERN = VALUE'");
  r.kind = WeightMap::Kind::Rename;
  r.pattern = trim(line.substr(0, arrow));
  r.target = trim(line.substr(arrow + 2));
  check_pattern(r.pattern, origin);
  check_pattern(r.target, origin);
  if (count_stars(r.pattern) != count_stars(r.target))
    throw ConfigError(origin + ": '" + line + "': both sides need the same number of '*'");
  return r;
}

}  // namespace

bool pattern_matches(const std::string& pattern, const std::string& name,
                     std::vector<std::string>* stars) {
  // Backtracking over the '*'s: each matches a run without '.', shortest first.
  std::vector<std::string> got;
  struct Matcher {
    const std::string& p;
    const std::string& n;
    std::vector<std::string>& got;
    bool run(size_t i, size_t j) {
      if (i == p.size()) return j == n.size();
      if (p[i] != '*') return j < n.size() && p[i] == n[j] && run(i + 1, j + 1);
      for (size_t k = j;; ++k) {
        got.push_back(n.substr(j, k - j));
        if (run(i + 1, k)) return true;
        got.pop_back();
        if (k == n.size() || n[k] == '.') return false;
      }
    }
  } m{pattern, name, got};
  const bool ok = m.run(0, 0);
  if (ok && stars) *stars = got;
  return ok;
}

WeightMap& WeightMap::rename(const std::string& a_pattern, const std::string& b_pattern) {
  const std::string origin = "rename(" + a_pattern + ", " + b_pattern + ")";
  check_pattern(a_pattern, origin);
  check_pattern(b_pattern, origin);
  if (count_stars(a_pattern) != count_stars(b_pattern))
    throw std::invalid_argument(origin + ": both sides need the same number of '*'");
  rules.push_back({Kind::Rename, a_pattern, b_pattern, kInit, origin});
  return *this;
}

WeightMap& WeightMap::fix_a(const std::string& pattern, HeldValue value) {
  check_pattern(pattern, "fix_a(" + pattern + ")");
  rules.push_back({Kind::HoldA, pattern, "", value, "fix_a(" + pattern + ")"});
  return *this;
}

WeightMap& WeightMap::fix_b(const std::string& pattern, HeldValue value) {
  check_pattern(pattern, "fix_b(" + pattern + ")");
  rules.push_back({Kind::HoldB, pattern, "", value, "fix_b(" + pattern + ")"});
  return *this;
}

WeightMap WeightMap::parse(const std::string& text, const std::string& origin) {
  WeightMap map;
  std::istringstream in(text);
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    // A control byte (a NUL above all) would cut the message that quotes the line: name it.
    for (size_t i = 0; i < line.size(); ++i) {
      const auto c = static_cast<unsigned char>(line[i]);
      if (c >= 0x20 || c == '\t' || c == '\r') continue;
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", c);
      throw ConfigError(origin + ":" + std::to_string(lineno) + ": " +
                        (c == 0 ? "a NUL byte (" : "a control byte (") + byte + ") at column " +
                        std::to_string(i + 1) + ": a weight map is text, one rule a line");
    }
    const auto hash = line.find('#');
    line = trim(hash == std::string::npos ? line : line.substr(0, hash));
    if (!line.empty()) map.rules.push_back(parse_line(line, origin + ":" + std::to_string(lineno)));
  }
  return map;
}

WeightMap WeightMap::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw FileError(path + ": cannot read the weight map");
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

}  // namespace normlab::equivalence
