// How B's parameters get their values from A's in an equivalence test (equivalence.h), in code
// or as a file for `normlab compare --map`. No LibTorch: the rules are text until applied.
//
// The text form (one rule a line, `#` comments):
//   A_PATTERN -> B_PATTERN     A's parameters matching A_PATTERN are copied to B's of that name
//   a: PATTERN = VALUE         A's parameters matching PATTERN are held at VALUE (not copied)
//   b: PATTERN = VALUE         B's parameters matching PATTERN are held at VALUE (not copied to)
// A pattern is a parameter name in which `*` stands for any run of characters without a `.`;
// the k-th `*` of B_PATTERN is what the k-th `*` of A_PATTERN matched. VALUE is a number (every
// element) or `init` (the model's own initial value). A rename or `a:` rule decides an A parameter
// (the first that matches it); a parameter no rule matches keeps its name. Every parameter of A
// must be copied to a parameter of B with the same shape or held; every parameter of B must
// receive exactly one of A's or be held; every rule must match some parameter: else ConfigError,
// naming the parameter (and the map's file and line). Held parameters are the constants of the
// reduction (a zero gain, n = 1 stream's connections at their init): they are not compared.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace normlab::equivalence {

/// A held parameter's value: a number for every element, or nullopt (kInit) for the model's own
/// initial value.
using HeldValue = std::optional<double>;
inline constexpr std::nullopt_t kInit = std::nullopt;

/// How B's parameters get their values from A's (the rules above). Empty: every parameter by its
/// own name.
struct WeightMap {
  enum class Kind { Rename, HoldA, HoldB };
  struct Rule {
    Kind kind = Kind::Rename;
    std::string pattern;  // A's name pattern (Rename, HoldA) or B's (HoldB)
    std::string target;   // Rename: B's name pattern
    HeldValue value;      // HoldA, HoldB
    std::string origin;   // where the rule was written ("map.txt:3"), for error messages
  };
  std::vector<Rule> rules;

  WeightMap& rename(const std::string& a_pattern, const std::string& b_pattern);
  WeightMap& fix_a(const std::string& pattern, HeldValue value);
  WeightMap& fix_b(const std::string& pattern, HeldValue value);

  /// Parses the text form; `origin` names it in errors ("map.txt" gives "map.txt:3: ...").
  static WeightMap parse(const std::string& text, const std::string& origin);
  /// Reads and parses a map file (FileError when it cannot be read).
  static WeightMap load(const std::string& path);
};

/// Whether `name` matches `pattern` (`*` = a run of characters without `.`); `stars` receives
/// what each `*` matched.
bool pattern_matches(const std::string& pattern, const std::string& name,
                     std::vector<std::string>* stars = nullptr);

}  // namespace normlab::equivalence
