// Logging: spdlog behind one setup call.
//
// Code logs through spdlog's default logger (spdlog::info(...)). InitLogging
// installs a stderr logger with a pid/thread-aware pattern and the level given
// by --log-level. Thread-safety: InitLogging must run once at startup before
// other threads start; logging itself is thread-safe (spdlog _mt sink).
#pragma once

#include <string_view>

#include "lmcache/status.h"

namespace lmcache {

// Accepts trace, debug, info, warn, error, critical, off (case-insensitive).
Status InitLogging(std::string_view level);

// Whether `level` is one of the names above.
bool IsValidLogLevel(std::string_view level);

}  // namespace lmcache
