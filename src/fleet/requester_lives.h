// RequesterLives: which requester, in which life, each connection to this
// owner's fleet endpoint speaks for, from the p2p_hello a member sends
// before each handshake (fleet/peer_info.h, PeerHello). PeerTasks keys a
// peer's tasks by the name this gives (server/p2p_ops.h):
//  - A connection that said hello is known by its life ("life:" + boot id),
//    so a requester whose connection ZMQ remade after a break (the new one
//    has a new id) still reaches the tasks, and unlocks the locks, it took
//    on the old one. Any other connection is known by its own id.
//  - A new boot id at a requester's URL means the old life ended (its
//    process was killed or restarted): the old life's tasks are ended, with
//    their locks, once none of its connections is open. An open one may be
//    a live process misconfigured with the same URL, still reading through
//    those locks; it ends at its close (a SIGKILL closes it at once), or
//    the reaper and the read TTL end its tasks.
// Only a connection that proved the fleet key is named (the caller's
// check): a stranger cannot end a member's tasks by claiming its URL.
//
// Memory is bounded: at most `max_lives` lives are remembered; past that, a
// life with no open connection is forgotten first (its tasks stay under its
// name, and a hello of that life finds them again), and a hello that finds
// none to forget leaves its connection known by its own id.
//
// Thread-safety: every method from any thread (one mutex).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "fleet/peer_info.h"

namespace lmcache::fleet {

class RequesterLives {
 public:
  explicit RequesterLives(std::size_t max_lives = 4096) : max_lives_(max_lives) {}

  // The name PeerTasks knows the requester on `connection` by.
  std::string PeerOf(std::string_view connection) const LMC_EXCLUDES(mu_);
  // `connection` speaks for `hello`'s life. Returns the names of earlier
  // lives of its URL to end now (none of their connections is open).
  std::vector<std::string> Hello(std::string_view connection, const PeerHello& hello)
      LMC_EXCLUDES(mu_);
  // `connection` closed. Returns its life's name if that life is to end now
  // (a newer life of its URL said hello, and this was its last open
  // connection).
  std::vector<std::string> Closed(std::string_view connection) LMC_EXCLUDES(mu_);

  std::size_t lives() const LMC_EXCLUDES(mu_);

 private:
  struct Life {
    std::string url;
    std::size_t open = 0;     // connections that said hello for it and are open
    bool superseded = false;  // a newer life of its URL said hello
  };

  // Makes room for one more life; false when every life has a connection open.
  bool MakeRoom() LMC_REQUIRES(mu_);
  // `connection` no longer speaks for its life; that life's name if it is to end now.
  std::vector<std::string> Leave(std::string_view connection) LMC_REQUIRES(mu_);

  const std::size_t max_lives_;
  mutable Mutex mu_;
  std::map<std::string, Life, std::less<>> lives_ LMC_GUARDED_BY(mu_);         // by name
  std::map<std::string, std::string, std::less<>> named_ LMC_GUARDED_BY(mu_);  // connection -> name
};

}  // namespace lmcache::fleet
