#include "common/system_info.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace lmcache {

std::uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

Result<FilesystemSpace> QueryFilesystemSpace(const std::string& path) {
  struct statvfs info {};
  if (statvfs(path.c_str(), &info) != 0) {
    return Status(ErrorCode::kIoError, "statvfs(" + path + ") failed: " + std::strerror(errno));
  }
  FilesystemSpace space;
  space.total_bytes = static_cast<std::uint64_t>(info.f_blocks) * info.f_frsize;
  space.free_bytes = static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
  return space;
}

}  // namespace lmcache
