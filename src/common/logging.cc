#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace lmcache {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

bool IsValidLogLevel(std::string_view level) {
  const std::string name = Lower(level);
  // spdlog maps unknown names to "off"; accept "off" only when asked for by name.
  return name == "off" || spdlog::level::from_str(name) != spdlog::level::off;
}

Status InitLogging(std::string_view level) {
  if (!IsValidLogLevel(level)) {
    return InvalidConfig("--log-level: unknown level '" + std::string(level) +
                         "'; use trace, debug, info, warn, error, critical or off");
  }
  auto logger = spdlog::stderr_color_mt("lmcache");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [pid %P tid %t] %v");
  logger->set_level(spdlog::level::from_str(Lower(level)));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

bool RateLimitedLog::Allow(std::uint64_t* suppressed) {
  const TimeMs now = clock_->NowMs();
  TimeMs next = next_allowed_ms_.load(std::memory_order_relaxed);
  if (now < next ||
      !next_allowed_ms_.compare_exchange_strong(next, now + interval_ms_,
                                                std::memory_order_relaxed)) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    total_suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace lmcache
