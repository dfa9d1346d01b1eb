// What a tool that starts servers sharing over P2P on loopback needs
// (lmcache-bench's p2p phase, lmcache-soak --nodes): free ports for their
// fleet endpoints and a fleet key file. Also a directory removed with its
// contents when the object dies.
// Thread-safety: plain functions; a ScopedDirectory has one owner.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::tools {

// `count` distinct ports on 127.0.0.1 free now, below the kernel's
// ephemeral range (tests/fakes/free_port.h says why): a server started on
// one right after fails clearly in the rare case another process asked for
// the same number.
Result<std::vector<int>> FreeLoopbackTcpPorts(int count);

// 32 random bytes in `dir`/fleet.key, mode 0600 (what --p2p-auth-key-file
// accepts); its path.
Result<std::string> WriteFleetKeyFile(const std::filesystem::path& dir);

// `path`, created empty (removed first if it was there), and removed with
// its contents when this dies.
class ScopedDirectory {
 public:
  explicit ScopedDirectory(std::filesystem::path path);
  ~ScopedDirectory();
  ScopedDirectory(const ScopedDirectory&) = delete;
  ScopedDirectory& operator=(const ScopedDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace lmcache::tools
