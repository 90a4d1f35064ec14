// Logger: library floors log through a sink the application installs (STYLE.md §3.7); they never
// write to stdout or stderr themselves. One line per event, `key=value` fields.
// A Logger is passed down by pointer in each floor's options (no global logger); a null pointer
// or the default Logger drops everything.
// Thread safety: log() may be called concurrently if the sink is thread-safe.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace strata {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

std::string_view log_level_name(LogLevel level);

class Logger {
 public:
  using Sink = std::function<void(LogLevel, std::string_view)>;

  Logger() = default;
  Logger(LogLevel max_level, Sink sink) : max_level_(max_level), sink_(std::move(sink)) {}

  bool enabled(LogLevel level) const { return sink_ && level <= max_level_; }
  void log(LogLevel level, std::string_view line) const {
    if (enabled(level)) sink_(level, line);
  }
  void error(std::string_view l) const { log(LogLevel::kError, l); }
  void warn(std::string_view l) const { log(LogLevel::kWarn, l); }
  void info(std::string_view l) const { log(LogLevel::kInfo, l); }
  void debug(std::string_view l) const { log(LogLevel::kDebug, l); }

 private:
  LogLevel max_level_ = LogLevel::kInfo;
  Sink sink_;
};

// Logs through `logger` if it is not null.
inline void log_to(const Logger* logger, LogLevel level, std::string_view line) {
  if (logger) logger->log(level, line);
}

}  // namespace strata
