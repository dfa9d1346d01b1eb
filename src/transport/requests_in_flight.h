// RequestsInFlight: how many requests of each client connection the handler
// is running, so that a connection's close reaches the handler only after
// every request it sent has been answered.
//
// Why: a request waits in a pool while the loop reads the monitor's
// DISCONNECTED, and a killed worker's last lookup or registration would
// otherwise run after its connection was released, leaving read locks (or a
// registration) recorded under a connection nobody will release again until
// a TTL passes (lmcache-soak found 12 such read leases after 840 kills).
// A message read after its connection's close (it was still queued in the
// socket) is counted as closing from the start: once it is answered, the
// handler is told the connection is gone once more, so whatever it created
// is released too (OnDisconnect is idempotent).
//
// Thread-safety: none; the router loop's thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace lmcache::transport {

class RequestsInFlight {
 public:
  // A request of `connection` was handed to the handler; `late`: the
  // connection had closed before the request was read.
  void Started(const std::string& connection, bool late);
  // One of its requests was answered. True when the handler must now be told
  // the connection is gone (it closed, and this was its last request).
  bool Answered(const std::string& connection);
  // The connection closed. True when the handler may be told at once
  // (nothing in flight); otherwise the last Answered() returns true.
  bool Closed(const std::string& connection);
  // Connections with requests in flight, and those of them already closed.
  std::size_t connections() const { return entries_.size(); }
  std::size_t closing() const;

 private:
  struct Entry {
    std::uint64_t in_flight = 0;
    bool closed = false;
  };
  std::unordered_map<std::string, Entry> entries_;  // only with requests in flight
};

}  // namespace lmcache::transport
