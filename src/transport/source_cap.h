// SourceCap: at most N connections of one endpoint from one source address
// (issue 62, section 4). The fleet endpoint's members each hold a few
// connections; a host opening hundreds, idle or not, is holding descriptors
// the server needs for its workers. The router asks on each accepted
// connection and shuts those beyond the cap down at once (ZMQ then closes
// them); the handshake deadline (ZMQ_HANDSHAKE_IVL) ends the idle ones
// within the cap.
//
// Thread-safety: none; the router loop's thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace lmcache::transport {

class SourceCap {
 public:
  // `local_port`: the endpoint's own port. The monitor reports descriptor
  // numbers after the fact, so a number may already name another socket of
  // the process: only one whose own side is this port is counted or refused.
  SourceCap(std::size_t max_per_source, std::uint16_t local_port)
      : max_per_source_(max_per_source), local_port_(local_port) {}

  // A connection accepted on `fd`: false (and not recorded) when its source
  // already holds the cap. A descriptor whose peer cannot be named, or that
  // is not on this endpoint's port, is let through uncounted.
  bool Accepted(int fd);
  // `fd` closed: its source's count goes down (a descriptor not recorded: nothing).
  void Closed(int fd);
  std::size_t ConnectionsFrom(const std::string& source) const;

 private:
  const std::size_t max_per_source_;
  const std::uint16_t local_port_;
  std::unordered_map<int, std::string> source_of_;
  std::unordered_map<std::string, std::size_t> count_;
};

}  // namespace lmcache::transport
