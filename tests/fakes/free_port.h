// Loopback tcp ports for a test or a tool that starts servers on them by
// number. A port is drawn at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), where the kernel never hands one
// to an outgoing connection or a port-0 listener on its own, so between the
// pick and the server's bind only another picker can take it. The tests of
// one ctest run pick in many processes at once (and a server killed and
// restarted on its port leaves it free a while), so every pick is written,
// under an flock, to a registry shared by all pickers of one user, C++ and
// Python alike (tests/python/free_ports.py: same file, same format, the
// reasons in full there). A port stays reserved there for kReserveSeconds.
// Where the registry cannot be used (not created or locked, or not a regular
// file of this user's), picks go unregistered; where the range has no free
// port left, the kernel picks one.
// LMCACHE_TEST_PORT_REGISTRY and LMCACHE_TEST_PORT_RANGE ("LOW-HIGH") replace
// the registry and the range, for the picker's own tests.
// Thread-safety: free functions; calls from several threads or processes
// are serialised by the registry's flock.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace lmcache::testing {

namespace free_port_detail {

// Longer than the longest ctest timeout of a test that picks ports (600 s).
constexpr std::int64_t kReserveSeconds = 900;
constexpr int kLowestPort = 10000;
constexpr int kAttempts = 200;

inline int EphemeralPortFloor() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (range >> low) return low;
  return 32768;
}

// The ports picks are drawn from, both ends included; none where the
// ephemeral range starts too low to leave room below it.
inline std::optional<std::pair<int, int>> PickRange() {
  if (const char* override = std::getenv("LMCACHE_TEST_PORT_RANGE"); override && *override) {
    int low = 0;
    int high = 0;
    if (std::sscanf(override, "%d-%d", &low, &high) == 2 && low <= high) {
      return std::pair{low, high};
    }
  }
  const int floor = EphemeralPortFloor();
  if (floor <= kLowestPort + 2000) return std::nullopt;
  return std::pair{kLowestPort, floor - 1};
}

// LMCACHE_TEST_PORT_REGISTRY, else lmcache-test-ports.UID in $TMPDIR where
// that is a directory, else in /tmp: free_ports.py's rule, so both languages
// always meet in one file.
inline std::string RegistryPath() {
  if (const char* path = std::getenv("LMCACHE_TEST_PORT_REGISTRY"); path && *path) return path;
  const char* tmpdir = std::getenv("TMPDIR");
  std::error_code error;
  const std::filesystem::path directory =
      tmpdir && *tmpdir && std::filesystem::is_directory(tmpdir, error) ? tmpdir : "/tmp";
  return (directory / ("lmcache-test-ports." + std::to_string(::getuid()))).string();
}

// The registry file, opened and flocked for as long as this lives. Never
// follows a symbolic link and takes only a regular file of this user's: in a
// shared /tmp another user could otherwise plant a link to a file of ours,
// which the rewrite would truncate.
class LockedRegistry {
 public:
  LockedRegistry()
      : fd_(::open(RegistryPath().c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) {
    struct stat info {};
    if (fd_ >= 0 && (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode) ||
                     info.st_uid != ::getuid() || !Lock())) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~LockedRegistry() {
    if (fd_ >= 0) ::close(fd_);  // and with it the lock
  }
  LockedRegistry(const LockedRegistry&) = delete;
  LockedRegistry& operator=(const LockedRegistry&) = delete;

  bool usable() const { return fd_ >= 0; }

  // {port: expiry} of the unexpired lines; malformed ones are dropped.
  std::map<int, std::int64_t> Read(std::int64_t now) const {
    std::string text;
    char buffer[4096];
    ::lseek(fd_, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd_, buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
    std::map<int, std::int64_t> reserved;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      int port = 0;
      long long expiry = 0;
      char extra = 0;
      if (std::sscanf(line.c_str(), "%d %lld %c", &port, &expiry, &extra) == 2 && expiry > now) {
        reserved[port] = expiry;
      }
    }
    return reserved;
  }

  // Written over from the start, then cut to length, so a writer killed
  // midway leaves the reservations it had read.
  void Write(const std::map<int, std::int64_t>& reserved) const {
    std::string text;
    for (const auto& [port, expiry] : reserved) {
      text += std::to_string(port) + ' ' + std::to_string(expiry) + '\n';
    }
    ::lseek(fd_, 0, SEEK_SET);
    for (std::size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n <= 0) return;
      done += static_cast<std::size_t>(n);
    }
    (void)::ftruncate(fd_, static_cast<off_t>(text.size()));
  }

 private:
  bool Lock() const {
    int result = 0;
    do {
      result = ::flock(fd_, LOCK_EX);
    } while (result != 0 && errno == EINTR);  // a signal while another picker holds it
    return result == 0;
  }

  int fd_;
};

inline bool BindLoopback(int fd, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  return ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
}

inline int BoundPort(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  return ntohs(address.sin_port);
}

// Binds `fd` to a random port of `range` that is neither reserved nor in
// use; false when kAttempts draws found none.
inline bool BindUnreserved(int fd, const std::optional<std::pair<int, int>>& range,
                           const std::map<int, std::int64_t>& reserved, std::mt19937& random) {
  if (!range) return false;
  std::uniform_int_distribution<int> draw(range->first, range->second);
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const int port = draw(random);
    if (!reserved.contains(port) && BindLoopback(fd, port)) return true;
  }
  return false;
}

}  // namespace free_port_detail

// `count` distinct free ports no other picker of this user was handed in the
// last kReserveSeconds (a 0 where even the kernel found none).
inline std::vector<int> FreeTcpPorts(int count) {
  using namespace free_port_detail;
  const auto range = PickRange();
  std::mt19937 random(std::random_device{}());
  const LockedRegistry registry;
  const std::int64_t now = std::time(nullptr);
  std::map<int, std::int64_t> reserved;
  if (registry.usable()) reserved = registry.Read(now);
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!BindUnreserved(fd, range, reserved, random)) BindLoopback(fd, 0);
    fds.push_back(fd);
    ports.push_back(BoundPort(fd));
    reserved[ports.back()] = now + kReserveSeconds;
  }
  if (registry.usable()) registry.Write(reserved);
  for (const int fd : fds) ::close(fd);
  return ports;
}

// One port as FreeTcpPorts picks them.
inline int FreeTcpPort() { return FreeTcpPorts(1)[0]; }

}  // namespace lmcache::testing
