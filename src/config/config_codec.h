// The text of one configuration value, both ways, and what a value of each type is called:
// shared by the YAML decoder and encoder (config_io.cpp), the documented list of keys
// (config_reference.cpp) and the sweep-file parser (sweep_file.cpp). Private to src/config/.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>

#include "normlab/util/name_table.h"

namespace normlab::config_codec {

template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_integral_v<T>)
    return "integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "float";
  else if constexpr (std::is_same_v<T, std::string>)
    return "string";
  else if constexpr (std::is_enum_v<T>)
    return "one of: " + enum_names_joined<T>();
  else
    return "?";
}

// What a value of T looks like, for "expected ..." messages.
template <class T>
std::string expected_phrase() {
  if constexpr (std::is_same_v<T, bool>)
    return "true or false";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else
    return "one of " + enum_names_joined<T>();
}

// Parses the text of one value into T; returns an error message or "".
template <class T>
std::string parse_text(const std::string& s, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (s == "true")
      out = true;
    else if (s == "false")
      out = false;
    else
      return "expected true or false, got '" + s + "'";
  } else if constexpr (std::is_integral_v<T>) {
    T v{};
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size())
      return "expected an integer, got '" + s + "'";
    out = v;
  } else if constexpr (std::is_floating_point_v<T>) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
      return "expected a number, got '" + s + "'";
    out = v;
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = s;
  } else if constexpr (std::is_enum_v<T>) {
    for (const auto& row : EnumNames<T>::rows)
      if (s == row.name) {
        out = row.value;
        return "";
      }
    return "unknown value '" + s + "' (valid: " + enum_names_joined<T>() + ")";
  }
  return "";
}

template <class T>
std::string to_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_integral_v<T>)
    return std::to_string(v);
  else if constexpr (std::is_floating_point_v<T>) {
    // The shortest text that reads back exactly; positional for ordinary magnitudes
    // (10000.0, not 1e+04), and always recognisably a float (1 -> 1.0).
    const bool positional = v == 0 || (std::abs(v) >= 1e-3 && std::abs(v) < 1e15);
    char buf[64];
    for (int p = 1; p <= 17; ++p) {
      std::snprintf(buf, sizeof buf, positional ? "%.*f" : "%.*g", p, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    std::string r = buf;
    if (r.find_first_of(".en") == std::string::npos) r += ".0";
    return r;
  } else if constexpr (std::is_same_v<T, std::string>)
    return v;
  else if constexpr (std::is_enum_v<T>)
    return std::string(enum_name(v));
}

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

}  // namespace normlab::config_codec
