// Logger implementation. This translation unit is compiled in the `normlab_log` target, which
// links spdlog (and Debian's fmt) and deliberately does not see torch's include directories.
#include "normlab/util/log.h"
#include "normlab/util/error.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <stdexcept>
#include <vector>

namespace normlab {
namespace {

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return spdlog::level::debug;
    case LogLevel::Info: return spdlog::level::info;
    case LogLevel::Warn: return spdlog::level::warn;
    case LogLevel::Error: return spdlog::level::err;
    case LogLevel::Off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

LogLevel log_level_from_string(std::string_view name) {
  if (name == "debug") return LogLevel::Debug;
  if (name == "info") return LogLevel::Info;
  if (name == "warn") return LogLevel::Warn;
  if (name == "error") return LogLevel::Error;
  if (name == "off") return LogLevel::Off;
  throw ConfigError("unknown log level '" + std::string(name) +
                    "' (valid: debug, info, warn, error, off)");
}

struct Logger::Impl {
  // Constructed directly, not through spdlog's global registry: each Logger owns its sinks.
  std::shared_ptr<spdlog::logger> logger;
  std::shared_ptr<spdlog::logger> file_only;  // the file sink alone (none without a file)
};

Logger::Logger(std::string name, LogLevel level, const std::string& file) : impl_(new Impl) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!file.empty()) sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
  // Every line is written through at once (flushed at every level): a run's log is read after
  // a crash, a kill -9 or a second SIGTERM, when no buffer would be flushed. A run logs a few
  // lines a step at most, so the flushes cost nothing measurable.
  if (sinks.size() > 1) {
    impl_->file_only = std::make_shared<spdlog::logger>(name, sinks.back());
    impl_->file_only->flush_on(spdlog::level::trace);
  }
  impl_->logger = std::make_shared<spdlog::logger>(std::move(name), sinks.begin(), sinks.end());
  impl_->logger->set_pattern("[%H:%M:%S] %^%l%$ %v");
  impl_->logger->set_level(to_spdlog(level));
  impl_->logger->flush_on(spdlog::level::trace);
}

Logger::~Logger() = default;
Logger::Logger(Logger&&) noexcept = default;
Logger& Logger::operator=(Logger&&) noexcept = default;

// Messages are passed as "{}" arguments so that braces in them are printed, not interpreted.
void Logger::debug(std::string_view msg) const { impl_->logger->debug("{}", msg); }
void Logger::info(std::string_view msg) const { impl_->logger->info("{}", msg); }
void Logger::warn(std::string_view msg) const { impl_->logger->warn("{}", msg); }
void Logger::error(std::string_view msg) const { impl_->logger->error("{}", msg); }
void Logger::error_to_file(std::string_view msg) const {
  (impl_->file_only ? impl_->file_only : impl_->logger)->error("{}", msg);
}
void Logger::set_level(LogLevel level) {
  impl_->logger->set_level(to_spdlog(level));
  if (impl_->file_only) impl_->file_only->set_level(to_spdlog(level));
}
bool Logger::enabled(LogLevel level) const { return impl_->logger->should_log(to_spdlog(level)); }
void Logger::flush() const { impl_->logger->flush(); }

}  // namespace normlab
