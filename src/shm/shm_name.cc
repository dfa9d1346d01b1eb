#include "shm/shm_name.h"

#include "common/file_lock.h"
#include "common/unique_fd.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>

#include <fcntl.h>

#include <cerrno>
#include <charconv>
#include <memory>

namespace lmcache::shm {

Result<std::string> NormalizePoolName(std::string_view requested, pid_t pid) {
  if (requested.empty()) return std::string(kPoolPrefix) + std::to_string(pid);
  while (!requested.empty() && requested.front() == '/') requested.remove_prefix(1);
  if (requested.empty()) return InvalidConfig("--shm-name: a name is needed after the '/'");
  if (requested.find_first_of(std::string_view("/\\\0", 3)) != std::string_view::npos) {
    return InvalidConfig("--shm-name: '" + std::string(requested) +
                         "' must not contain '/', '\\' or NUL after its leading '/'");
  }
  std::string name(requested);
  if (!name.starts_with(kPoolPrefix)) name = std::string(kPoolPrefix) + name;
  if (name.size() > NAME_MAX) {
    return InvalidConfig("--shm-name: '" + name + "' is longer than " + std::to_string(NAME_MAX) +
                         " characters");
  }
  return name;
}

pid_t PidOfDefaultName(std::string_view name) {
  if (!name.starts_with(kPoolPrefix)) return -1;
  const std::string_view digits = name.substr(kPoolPrefix.size());
  if (digits.empty() || digits.size() > 10) return -1;
  pid_t pid = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
  if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) return -1;
  return pid;
}

std::vector<std::string> RemoveOrphanedPoolSegments(const std::string& shm_dir) {
  std::vector<std::string> removed;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(shm_dir.c_str()), &closedir);
  if (!dir) return removed;
  while (const dirent* entry = readdir(dir.get())) {
    const std::string name = entry->d_name;
    const pid_t pid = PidOfDefaultName(name);
    if (pid <= 0) continue;
    // ESRCH: no such process, so nobody serves this segment any more. EPERM
    // means the process exists under another user: leave it alone.
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    // And nobody holds its lock (a live server of another pid namespace would).
    UniqueFd fd(shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0));
    if (!fd.valid()) continue;
    const Result<bool> unowned = TryLockExclusive(fd.get());
    if (!unowned.ok() || !*unowned) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

}  // namespace lmcache::shm
