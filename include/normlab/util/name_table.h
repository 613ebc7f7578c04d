// Enum <-> name tables: the one place each enum's config spelling appears.
//
// An enum E opts in by specialising EnumNames<E> with a `rows` array of {value, "name"}:
//   template <> struct EnumNames<Scheme> { static constexpr NameRow<Scheme> rows[] = {...}; };
// enum_name(v) and enum_from_name<E>(s, what) then work for it; an unknown name throws
// std::invalid_argument that lists the valid names.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

template <class E>
struct NameRow {
  E value;
  const char* name;
};

template <class E>
struct EnumNames;  // specialised next to each enum

template <class E>
std::string_view enum_name(E value) {
  for (const auto& row : EnumNames<E>::rows)
    if (row.value == value) return row.name;
  return "?";
}

/// "a, b, c": the valid names, for error messages and docs.
template <class E>
std::string enum_names_joined(std::string_view sep = ", ") {
  std::string out;
  for (const auto& row : EnumNames<E>::rows) {
    if (!out.empty()) out += sep;
    out += row.name;
  }
  return out;
}

template <class E>
std::vector<E> enum_values() {
  std::vector<E> out;
  for (const auto& row : EnumNames<E>::rows) out.push_back(row.value);
  return out;
}

/// Parses `name`; `what` names the thing in the error ("scheme", "model.norm_type").
template <class E>
E enum_from_name(std::string_view name, std::string_view what) {
  for (const auto& row : EnumNames<E>::rows)
    if (name == row.name) return row.value;
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(name) +
                              "' (valid: " + enum_names_joined<E>() + ")");
}

/// Levenshtein distance between two names.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// Did-you-mean: the candidate closest to `word` within 2 edits, else the first candidate
/// that `word` begins (a truncated name); empty when none is close.
inline std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 3;
  for (const auto& c : candidates)
    if (const size_t d = edit_distance(word, c); d < best_d) best_d = d, best = c;
  if (best.empty())
    for (const auto& c : candidates)
      if (c.rfind(word, 0) == 0 && !word.empty()) return c;
  return best;
}

/// "unknown key (did you mean 'PREFIXbest'?)", else "unknown key (valid keys here: a, b)".
inline std::string unknown_key_message(std::string_view key, const std::vector<std::string>& valid,
                                       std::string_view prefix = "") {
  const std::string best = closest_name(key, valid);
  if (!best.empty()) return "unknown key (did you mean '" + std::string(prefix) + best + "'?)";
  std::string msg = "unknown key (valid keys here: ";
  for (size_t i = 0; i < valid.size(); ++i) msg += (i ? ", " : "") + valid[i];
  return msg + ")";
}

}  // namespace normlab
