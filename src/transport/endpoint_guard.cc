#include "transport/endpoint_guard.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_lock.h"

namespace lmcache::transport {
namespace {

Status IoError(const std::string& what, const std::string& path) {
  return Status(ErrorCode::kIoError, what + " " + path + ": " + std::strerror(errno));
}

// The pid a lock file records, or 0.
pid_t RecordedPid(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  return n > 0 ? static_cast<pid_t>(std::strtol(buffer, nullptr, 10)) : 0;
}

}  // namespace

std::optional<pid_t> UnixSocketListener(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return std::nullopt;
  std::memcpy(address.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::nullopt;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return std::nullopt;  // ENOENT, ECONNREFUSED: nobody listens
  }
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return 0;
  return credentials.pid;
}

Result<std::unique_ptr<IpcEndpointLock>> IpcEndpointLock::Acquire(const std::string& socket_path) {
  const std::string lock_path = socket_path + ".lock";
  UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid()) return IoError("cannot open the endpoint lock", lock_path);
  LMC_ASSIGN_OR_RETURN(const bool locked, TryLockExclusive(fd.get()));
  if (!locked) {
    const pid_t holder = RecordedPid(fd.get());
    return Status(ErrorCode::kAlreadyExists,
                  "another lmcache-server (pid " + std::to_string(holder) + ") already serves ipc://" +
                      socket_path + "; stop it first or choose another --url");
  }
  if (const std::optional<pid_t> listener = UnixSocketListener(socket_path)) {
    return Status(ErrorCode::kAlreadyExists,
                  "a process (pid " + std::to_string(*listener) + ") already listens on " +
                      socket_path + "; refusing to replace its socket file (choose another --url)");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return IoError("cannot write the endpoint lock", lock_path);
  }
  return std::unique_ptr<IpcEndpointLock>(new IpcEndpointLock(socket_path, std::move(fd)));
}

void IpcEndpointLock::RecordBound() {
  struct stat info {};
  if (::stat(socket_path_.c_str(), &info) == 0) bound_ = std::make_pair(info.st_dev, info.st_ino);
}

IpcEndpointLock::~IpcEndpointLock() {
  struct stat info {};
  if (bound_ && ::stat(socket_path_.c_str(), &info) == 0 &&
      std::make_pair(info.st_dev, info.st_ino) == *bound_) {
    ::unlink(socket_path_.c_str());
  }
  // Removed while still locked: a server that opened it meanwhile finds the
  // socket bound by its successor (or none) and decides on its own.
  ::unlink((socket_path_ + ".lock").c_str());
}

}  // namespace lmcache::transport
