// ConfigureFromCommandLine: lmcache-server's first step. Parses the command
// line (daemon::AddFlags), starts logging as the flags say, finalizes the
// configuration (daemon::Finalize, which refuses what cannot run with a
// message that says what to change), logs its notices and records the
// effective flags for GET /config.
//
// Thread-safety: once, on the main thread before any other starts (it sets
// up the process's logging).
#pragma once

#include <optional>

#include "daemon/config.h"

namespace lmcache::daemon {

// std::nullopt: `config` is ready and the server starts. Otherwise the exit
// code: 0 after --help or --version, CLI11's code for a command line it
// cannot parse, 2 for a configuration the server refuses (logged) or logging
// that cannot start (on stderr).
std::optional<int> ConfigureFromCommandLine(int argc, const char* const* argv,
                                            ServerConfig* config);

}  // namespace lmcache::daemon
