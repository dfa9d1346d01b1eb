// Facts about the machine that sizing defaults depend on.
// Thread-safety: stateless functions, safe anywhere.
#pragma once

#include <cstdint>
#include <string>

#include "lmcache/status.h"

namespace lmcache {

// Physical memory in bytes (sysconf), 0 if unknown.
std::uint64_t PhysicalMemoryBytes();

struct FilesystemSpace {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;  // available to an unprivileged writer
};

// statvfs of `path`.
Result<FilesystemSpace> QueryFilesystemSpace(const std::string& path);

inline constexpr std::uint64_t kGiB = 1ull << 30;
inline constexpr std::uint64_t kMiB = 1ull << 20;

}  // namespace lmcache
