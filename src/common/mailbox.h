// Mailbox<Command>: commands posted from any thread to one thread that sleeps
// in poll (zmq::poll, or poll(2) beside another fd): a queue under a mutex
// and the WakeFd the consumer polls. The UCX data channel's progress thread
// and the peer RPC's thread take their commands through one each.
//
// Once closed (the consumer is stopping), a post is refused: Post hands the
// command back, so its poster can fail it at once rather than leave it
// queued where no one will run it.
//
// Thread-safety: Post and Wake from any thread; Open, TakeAll, Close, fd()
// and Drain from the consumer's thread (Open before any other thread posts).
#pragma once

#include <deque>
#include <optional>
#include <utility>

#include "common/mutex.h"
#include "common/wake_fd.h"
#include "lmcache/status.h"

namespace lmcache {

template <typename Command>
class Mailbox {
 public:
  Status Open() {
    LMC_ASSIGN_OR_RETURN(wake_, WakeFd::Create());
    return Status::Ok();
  }

  // Queues `command` and wakes the consumer; after Close, returns it unqueued.
  std::optional<Command> Post(Command command) LMC_EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (closed_) return std::optional<Command>(std::move(command));
      commands_.push_back(std::move(command));
    }
    wake_.Wake();
    return std::nullopt;
  }
  // Wakes the consumer with nothing queued (to see a stop flag).
  void Wake() const { wake_.Wake(); }

  // Everything posted so far, in order.
  std::deque<Command> TakeAll() LMC_EXCLUDES(mu_) {
    std::deque<Command> taken;
    MutexLock lock(&mu_);
    taken.swap(commands_);
    return taken;
  }
  // TakeAll, and every later Post refused.
  std::deque<Command> Close() LMC_EXCLUDES(mu_) {
    std::deque<Command> taken;
    MutexLock lock(&mu_);
    taken.swap(commands_);
    closed_ = true;
    return taken;
  }

  // The descriptor to poll; Drain once it was readable.
  int fd() const { return wake_.fd(); }
  void Drain() const { wake_.Drain(); }

 private:
  WakeFd wake_;
  Mutex mu_;
  std::deque<Command> commands_ LMC_GUARDED_BY(mu_);
  bool closed_ LMC_GUARDED_BY(mu_) = false;
};

}  // namespace lmcache
