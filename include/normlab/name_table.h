// Enum <-> name tables: the one place each enum's config spelling appears.
//
// An enum E opts in by specialising EnumNames<E> with a `rows` array of {value, "name"}:
//   template <> struct EnumNames<Scheme> { static constexpr NameRow<Scheme> rows[] = {...}; };
// enum_name(v) and enum_from_name<E>(s, what) then work for it; an unknown name throws
// std::invalid_argument that lists the valid names.
#pragma once

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

}  // namespace normlab
