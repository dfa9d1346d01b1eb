// Naming rules of the L1 pool segment, and removal of stale segments.
//
// Names follow the reference (spec 11.1): a leading '/' is stripped and the
// prefix "lmcache_l1_pool_" is prepended when missing; the default is
// "lmcache_l1_pool_<server pid>". The segment lives at /dev/shm/<name>.
// Thread-safety: stateless functions, safe anywhere.
#pragma once

#include <sys/types.h>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::shm {

inline constexpr std::string_view kPoolPrefix = "lmcache_l1_pool_";

// "" -> default name for `pid`; otherwise the normalised form of `requested`.
// Fails for names that are empty after normalisation, hold '/' or '\\' or NUL,
// or exceed NAME_MAX.
Result<std::string> NormalizePoolName(std::string_view requested, pid_t pid);

// The pid in a default-form name "lmcache_l1_pool_<digits>", or -1.
pid_t PidOfDefaultName(std::string_view name);

// Removes segments in `shm_dir` whose names are default-form names of processes
// that no longer exist (crashed servers). Returns the names removed.
std::vector<std::string> RemoveOrphanedPoolSegments(const std::string& shm_dir = "/dev/shm");

}  // namespace lmcache::shm
