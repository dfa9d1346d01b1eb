// WakeFd: the eventfd a thread that sleeps in poll (zmq::poll, or poll(2)
// beside another fd) is woken through by other threads: the router loop
// (replies queued, stop), the KV event publisher (the log appended), and
// every Mailbox (common/mailbox.h: the UCX data channel's and the peer
// RPC's commands queued). Wake makes fd()
// readable; the owner's thread, having seen it readable, Drains it so the
// next poll sleeps until the next Wake. Several Wakes before a Drain are one.
//
// Thread-safety: Wake from any thread (one write(2), never blocking: the fd
// is non-blocking, and a counter at its maximum is already readable); Drain
// and fd() from the owner's thread. Create and destruction are the owner's.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/unique_fd.h"
#include "lmcache/status.h"

namespace lmcache {

class WakeFd {
 public:
  WakeFd() = default;  // not open: Wake does nothing
  static Result<WakeFd> Create() {
    WakeFd wake;
    wake.fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake.fd_.valid()) {
      return Status(ErrorCode::kIoError, std::string("eventfd: ") + std::strerror(errno));
    }
    return wake;
  }

  void Wake() const {
    if (!fd_.valid()) return;
    const std::uint64_t one = 1;
    (void)!::write(fd_.get(), &one, sizeof(one));
  }
  void Drain() const {
    std::uint64_t count = 0;
    (void)!::read(fd_.get(), &count, sizeof(count));
  }
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
};

}  // namespace lmcache
