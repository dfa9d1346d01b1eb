// Loopback tcp ports nobody listens on right now, for a test or a tool that
// starts servers on them. Drawn at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range): the kernel itself never hands
// such a port to an outgoing connection or a port-0 listener (a UCX worker,
// another server's client), so between the pick and the server's bind only
// a process that asked for that very number can take it. Each is held bound
// until all of one call are picked, so one call never returns a port twice.
// Where the ephemeral range starts too low to leave room, the kernel picks.
// Thread-safety: free functions, no shared state.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <vector>

namespace lmcache::testing {

namespace free_port_detail {

inline int EphemeralPortFloor() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (range >> low) return low;
  return 32768;
}

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

}  // namespace free_port_detail

// `count` distinct free ports (a 0 where even the kernel found none).
inline std::vector<int> FreeTcpPorts(int count) {
  constexpr int kLowest = 10000;
  const int floor = free_port_detail::EphemeralPortFloor();
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> below_ephemeral(kLowest, floor - 1);
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool bound = false;
    for (int attempt = 0; !bound && floor > kLowest + 2000 && attempt < 200; ++attempt) {
      bound = free_port_detail::BindLoopback(fd, below_ephemeral(random));
    }
    if (!bound) free_port_detail::BindLoopback(fd, 0);
    fds.push_back(fd);
    ports.push_back(free_port_detail::BoundPort(fd));
  }
  for (const int fd : fds) ::close(fd);
  return ports;
}

// One port as FreeTcpPorts picks them. Two calls return the same port only
// by a 1-in-20,000 chance: take several at once with FreeTcpPorts.
inline int FreeTcpPort() { return FreeTcpPorts(1)[0]; }

}  // namespace lmcache::testing
