// Endpoint guards: proof that this server may bind an endpoint, and the
// identity of a server that already holds one.
//
// An ipc endpoint is owned through "<socket path>.lock", flock'ed for the
// server's life and holding its pid: a second server finds the lock taken
// and is refused with that pid, instead of unlinking the socket file a live
// server listens on. A socket file that someone else listens on (no lock, a
// live listener) is refused as well. A stale file (a dead owner) is replaced.
// At shutdown the socket file is removed only if it is still the one this
// server bound.
//
// Thread-safety: an IpcEndpointLock belongs to one thread (the loop's owner).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/unique_fd.h"
#include "lmcache/status.h"

namespace lmcache::transport {

class IpcEndpointLock {
 public:
  // Locks `socket_path`'s lock file and checks that nobody listens on the path.
  static Result<std::unique_ptr<IpcEndpointLock>> Acquire(const std::string& socket_path);
  // Removes the socket file (if it is still the one bound) and the lock file.
  ~IpcEndpointLock();
  IpcEndpointLock(const IpcEndpointLock&) = delete;
  IpcEndpointLock& operator=(const IpcEndpointLock&) = delete;

  // Remembers the socket file just bound, so shutdown removes only that one.
  void RecordBound();

 private:
  IpcEndpointLock(std::string socket_path, UniqueFd lock_fd)
      : socket_path_(std::move(socket_path)), lock_fd_(std::move(lock_fd)) {}

  const std::string socket_path_;
  UniqueFd lock_fd_;
  std::optional<std::pair<dev_t, ino_t>> bound_;
};

// The pid of the process listening on unix socket `path`, if one listens.
// (std::nullopt: no listener; 0: a listener whose pid is not visible.)
std::optional<pid_t> UnixSocketListener(const std::string& path);

}  // namespace lmcache::transport
