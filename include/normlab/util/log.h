// Logger: console (and optionally file) logging for normlab programs.
//
// Backed by spdlog, which is compiled against Debian's fmt 9 while torch ships fmt 12 headers;
// this header therefore exposes no fmt or spdlog types, and the implementation lives in a
// separate target that never sees torch's include path (docs/dependencies.md). A Logger is an
// object that main() creates and hands down: there is no global logger.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace normlab {

enum class LogLevel { Debug, Info, Warn, Error, Off };

/// Parses "debug", "info", "warn", "error" or "off"; throws std::invalid_argument otherwise.
LogLevel log_level_from_string(std::string_view name);

class Logger {
 public:
  /// Logs to stderr; when `file` is non-empty, also appends to that file. Every line is written
  /// through (flushed) as it is logged, so a killed process loses none of its log.
  explicit Logger(std::string name, LogLevel level = LogLevel::Info, const std::string& file = "");
  ~Logger();
  Logger(Logger&&) noexcept;
  Logger& operator=(Logger&&) noexcept;
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  void debug(std::string_view msg) const;
  void info(std::string_view msg) const;
  void warn(std::string_view msg) const;
  void error(std::string_view msg) const;
  /// An error line for the log file only (a C++ backtrace, kept off the console); on the
  /// console when the logger has no file.
  void error_to_file(std::string_view msg) const;

  void set_level(LogLevel level);
  bool enabled(LogLevel level) const;
  void flush() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace normlab
