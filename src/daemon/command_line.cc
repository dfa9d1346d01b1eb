#include "daemon/command_line.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "common/logging.h"
#include "common/version.h"
#include "daemon/effective_flags.h"

namespace lmcache::daemon {

std::optional<int> ConfigureFromCommandLine(int argc, const char* const* argv,
                                            ServerConfig* config) {
  CLI::App app{"lmcache-server: a KV-cache daemon for LLM inference (LMCache MP protocol)",
               "lmcache-server"};
  AddFlags(app, config);
  app.set_version_flag("--version", std::string("lmcache-server ") + kVersion);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  LogOptions log;
  log.level = config->log_level;
  log.file = config->log_file;
  if (auto format = ParseLogFormat(config->log_format); format.ok()) log.format = *format;
  if (Status status = InitLogging(log); !status.ok()) {
    std::fprintf(stderr, "lmcache-server: %s\n", status.message().c_str());
    return 2;
  }
  if (Status status = Finalize(config, getpid()); !status.ok()) {
    spdlog::critical("invalid configuration: {}", status.message());
    return 2;
  }
  for (const std::string& notice : config->notices) spdlog::warn("{}", notice);
  config->effective_flags = EffectiveFlags(app);
  return std::nullopt;
}

}  // namespace lmcache::daemon
