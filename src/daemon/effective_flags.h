// EffectiveFlags: every flag of a parsed command line with its value (as
// given, else its default), secrets masked (common/mask_secrets.h), for GET
// /config. Flags whose default is computed at start (the pool's size, the
// worker counts) show the default CLI11 knows; the values the server runs
// with are in GET /status.
//
// Thread-safety: a pure function of a parsed CLI::App.
#pragma once

#include <CLI/CLI.hpp>

#include <vector>

#include "common/flag_values.h"

namespace lmcache::daemon {

std::vector<FlagValue> EffectiveFlags(const CLI::App& app);

}  // namespace lmcache::daemon
