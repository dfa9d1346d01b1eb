// ConnectionFds: which client connection (socket index + routing id) came in
// on which file descriptor of one ROUTER socket, so that the socket
// monitor's DISCONNECTED(fd) names the connection that closed.
//
// The data socket and its monitor are two queues read one after the other,
// and descriptor numbers are reused: when a worker dies and a new one
// connects at once (a restarted worker), the kernel gives the new connection
// the dead one's number, and the new worker's first message can be read
// before the monitor's DISCONNECTED for the dead one. Two rules keep a live
// connection from being ended by its predecessor's close:
//  * one descriptor carries one session at a time, so a new connection seen
//    on a descriptor that still names another proves the other one closed:
//    it is reported gone at once;
//  * the monitor reports ACCEPTED and DISCONNECTED of one descriptor in
//    order, so sessions on a descriptor are numbered by their ACCEPTED
//    events; a connection is given the lowest session it can belong to, and
//    a DISCONNECTED ends it only when it closes that session or a later one.
// A message can also be read after its connection's close: it was still
// queued in the socket when the monitor's DISCONNECTED was read. IsLate()
// names it (the descriptor's last closed connection, with no newer session
// accepted on it, or with another connection on it since), so the loop
// releases what it creates instead of mapping a dead connection again.
// What is left: a peer that connects and closes without a message, with its
// DISCONNECTED still unread when the next connection on its descriptor sends,
// ends that next connection (it re-registers at its next heartbeat); and a
// client that sets its own routing id and reconnects on its old descriptor
// has the messages it sends before its ACCEPTED is read taken as late (what
// they create is released; it re-registers at its next heartbeat).
//
// Thread-safety: none; the router loop's thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace lmcache::transport {

class ConnectionFds {
 public:
  // The monitor reported a connection accepted on `fd`.
  void Accepted(int fd);
  // A message of `connection` arrived on `fd`. Returns the connection the
  // descriptor named before, which has closed, if any. Cheap when the
  // connection is known already.
  std::optional<std::string> Seen(int fd, std::string_view connection);
  // The monitor reported `fd` closed. Returns the connection that closed,
  // if one was seen on it.
  std::optional<std::string> Closed(int fd);
  // Whether a message of `connection` on `fd` was sent before that
  // connection closed (it was read late). Such a message is not Seen().
  bool IsLate(int fd, std::string_view connection) const;
  // Connections currently mapped.
  std::size_t size() const { return fd_of_.size(); }

 private:
  struct Descriptor {
    std::uint64_t accepted = 0;  // ACCEPTED events read for it
    std::uint64_t closed = 0;    // DISCONNECTED events read for it
    std::string connection;      // the last connection seen on it ("" none)
    std::uint64_t session = 0;   // the lowest session `connection` can be in
    std::string last_closed;     // the connection that closed on it last
  };
  std::optional<std::string> Forget(Descriptor& descriptor);

  std::unordered_map<int, Descriptor> fds_;
  std::unordered_map<std::string, int> fd_of_;
};

}  // namespace lmcache::transport
