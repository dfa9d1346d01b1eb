// AcceptedOwners: the local user owning each TCP connection, as the kernel
// named it when the router's monitor saw the connection accepted (issue 62,
// section 2). A client that sends and closes at once leaves an orphaned
// socket with no owner by the time its first request is read; asked at the
// accept, its owner is still there to be told, and is kept for that
// connection.
//
// Descriptor numbers are reused, and the monitor's events and the data
// socket are two queues: an owner is handed out only to a message read on
// the same descriptor whose peer address and port are still those seen at
// the accept (a later connection on that number has another source port),
// and only once.
//
// Thread-safety: none; the router loop's thread owns it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "lmcache/status.h"

namespace lmcache::transport {

class AcceptedOwners {
 public:
  // The monitor saw `fd` accepted: its peer and owner are recorded now.
  void Accepted(int fd);
  // The owner recorded for the connection now on `fd`, if it is the one
  // accepted there (same peer address and port); forgotten after.
  std::optional<Result<uid_t>> Take(int fd);
  // The monitor saw `fd` closed.
  void Closed(int fd) { owners_.erase(fd); }
  std::size_t size() const { return owners_.size(); }

 private:
  struct Seen {
    std::string peer;  // address and port
    Result<uid_t> owner;
  };
  std::unordered_map<int, Seen> owners_;
};

}  // namespace lmcache::transport
