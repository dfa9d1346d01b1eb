// Logging: spdlog behind one setup call, and rate limiting for repeated lines.
//
// Code logs through spdlog's default logger (spdlog::info(...)). InitLogging
// installs a logger writing to stderr or to a file (--log-file), as text or
// as one JSON object per line (--log-format json, for log pipelines), at the
// level given by --log-level. ReopenLogFile() reopens the file (SIGHUP, after
// a log rotation); SetLogLevel() changes the level at run time (the HTTP
// /loglevel route). A condition that can repeat per request (a dropped reply,
// an expired lease, an L2 write failing) logs through a RateLimitedLog, so a
// flood costs one line per interval plus a count of what was suppressed.
// Thread-safety: InitLogging must run once at startup before other threads
// start; logging itself is thread-safe (spdlog _mt sink); a RateLimitedLog
// may be shared by any number of threads.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "lmcache/status.h"

namespace lmcache {

enum class LogFormat { kText, kJson };

struct LogOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off (any case)
  LogFormat format = LogFormat::kText;
  std::string file;  // empty: stderr
};

Status InitLogging(const LogOptions& options);
// Shorthand for text to stderr at `level`.
Status InitLogging(std::string_view level);
// Reopens the log file (no-op when logging to stderr).
Status ReopenLogFile();
Status SetLogLevel(std::string_view level);
std::string CurrentLogLevel();

// Whether `level` is one of the names above.
bool IsValidLogLevel(std::string_view level);
// "text" or "json".
Result<LogFormat> ParseLogFormat(std::string_view name);

// At most one line per `interval`; the line that passes says how many were
// suppressed since the previous one.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::chrono::milliseconds interval,
                          const Clock* clock = &SteadyClock::Instance())
      : interval_ms_(interval.count()), clock_(clock) {}

  // True when a line may be written now; `*suppressed` is then the number of
  // lines dropped since the last one written.
  bool Allow(std::uint64_t* suppressed);
  std::uint64_t total_suppressed() const { return total_suppressed_.load(); }

  template <typename... Args>
  void Log(spdlog::level::level_enum level, spdlog::format_string_t<Args...> format,
           Args&&... args) {
    std::uint64_t suppressed = 0;
    if (!Allow(&suppressed)) return;
    std::string line = fmt::format(format, std::forward<Args>(args)...);
    if (suppressed > 0) line += " (" + std::to_string(suppressed) + " similar lines suppressed)";
    spdlog::log(level, "{}", line);
  }
  template <typename... Args>
  void Warn(spdlog::format_string_t<Args...> format, Args&&... args) {
    Log(spdlog::level::warn, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Info(spdlog::format_string_t<Args...> format, Args&&... args) {
    Log(spdlog::level::info, format, std::forward<Args>(args)...);
  }
  template <typename... Args>
  void Error(spdlog::format_string_t<Args...> format, Args&&... args) {
    Log(spdlog::level::err, format, std::forward<Args>(args)...);
  }

 private:
  const TimeMs interval_ms_;
  const Clock* const clock_;
  std::atomic<TimeMs> next_allowed_ms_{0};
  std::atomic<std::uint64_t> suppressed_{0};
  std::atomic<std::uint64_t> total_suppressed_{0};
};

}  // namespace lmcache
