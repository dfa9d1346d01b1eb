#include "common/file_lock.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace lmcache {

Result<bool> TryLockExclusive(int fd) {
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return false;
    return Status(ErrorCode::kIoError, std::string("flock failed: ") + std::strerror(errno));
  }
  return true;
}

std::optional<pid_t> FlockHolder(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return std::nullopt;
  // Lines look like "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF".
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    std::istringstream fields(line);
    std::string id, kind, mode, access, device_inode;
    long pid = 0;
    if (!(fields >> id >> kind >> mode >> access >> pid >> device_inode)) continue;
    if (kind != "FLOCK") continue;
    unsigned major_id = 0, minor_id = 0;
    unsigned long long inode = 0;
    if (std::sscanf(device_inode.c_str(), "%x:%x:%llu", &major_id, &minor_id, &inode) != 3) continue;
    if (inode != info.st_ino || major_id != major(info.st_dev) || minor_id != minor(info.st_dev)) {
      continue;
    }
    if (pid > 0) return static_cast<pid_t>(pid);
  }
  return std::nullopt;
}

}  // namespace lmcache
