// ParseServerFlags: a command line parsed and finalized exactly as
// lmcache-server does (AddFlags, CLI11, Finalize), for tests of flags.
// Thread-safety: a pure function.
#pragma once

#include <sys/types.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace lmcache::testing {

// `args` without the program name; `pid` names the default pool.
inline Result<daemon::ServerConfig> ParseServerFlags(std::vector<std::string> args, pid_t pid) {
  CLI::App app;
  daemon::ServerConfig config;
  daemon::AddFlags(app, &config);
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return InvalidConfig(e.what());
  }
  LMC_RETURN_IF_ERROR(daemon::Finalize(&config, pid));
  return config;
}

}  // namespace lmcache::testing
