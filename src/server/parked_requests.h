// ParkedRequests: requests that answer later instead of holding a pool
// thread while they wait (deferred replies; docs/threading.md, "No pool
// thread waits").
//
// A handler that must wait for something (wait_prefetch_status for a
// prefetch to land) parks its request here with a deadline and a `finish`
// continuation, arranges for the returned waker to be called when the
// awaited thing happens, and returns: its pool thread is free at once. The
// continuation runs exactly once, told why the wait ended:
//   kWoken     the awaited thing happened (the waker was called);
//   kDeadline  the request's deadline passed;
//   kClosed    the client's connection closed (its answer goes nowhere, but
//              what the request holds is let go now, not at its deadline);
//   kDrained   the server is stopping.
// It then answers the request (it owns the request's Respond). Whichever
// of these comes first takes the request out under the mutex; the others
// find nothing.
//
// Cost bound: a connection may have at most `per_connection` requests
// parked, and the server `total`; a request over either is refused
// (kUnavailable, the answer a full queue gets) and never parked. A parked
// request holds its continuation (a few hundred bytes) and what that
// captures; its payload was decoded before it parked.
//
// Deadlines are kept by one thread of its own ("parked"), which sleeps until
// the next one is due (at most 100 ms at a time, so a fake clock moved by a
// test is seen). Continuations run on whichever thread ended the wait: the
// waker's, the deadline thread, the transport's on a close, the stopping
// one; never with this class's mutex held. They must be short: they build
// a reply.
//
// Wakers hold the parking lot weakly: a waker called after the service is
// gone (a prefetch landing during shutdown) does nothing.
//
// Thread-safety: every method from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "server/dispatch_stats.h"
#include "stats/declare.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "lmcache/status.h"

namespace lmcache::server {

std::string_view ParkEndName(ParkEnd end);

struct ParkedLimits {
  std::size_t per_connection = 64;
  std::size_t total = 65536;
};

// Per operation: how its parked requests ended.

class ParkedRequests {
 public:
  using Finish = std::function<void(ParkEnd)>;
  using Waker = std::function<void()>;

  // `clock` must outlive it. Starts its deadline thread.
  static std::shared_ptr<ParkedRequests> Create(const Clock* clock, const ParkedLimits& limits);
  ~ParkedRequests();  // Drain()s, then stops the thread
  ParkedRequests(const ParkedRequests&) = delete;
  ParkedRequests& operator=(const ParkedRequests&) = delete;

  // Lists `operation` in Stats() (with zeros) before it first parks.
  void Declare(std::string_view operation) LMC_EXCLUDES(mu_);
  // Parks a request of `operation` (a static name) from `connection` until
  // `deadline_ms` (the clock's time). Returns the waker to hand to whatever
  // will end the wait, or kUnavailable (a limit, or draining): then the
  // request was not parked and `finish` will never run.
  Result<Waker> Park(std::string_view operation, std::string_view connection, TimeMs deadline_ms,
                     Finish finish) LMC_EXCLUDES(mu_);
  // The connection closed: its parked requests end now (kClosed).
  void CloseConnection(std::string_view connection) LMC_EXCLUDES(mu_);
  // Ends every request whose deadline passed (the deadline thread calls it).
  void ExpireDue() LMC_EXCLUDES(mu_);
  // Ends every parked request (kDrained), refuses new ones from now on, and
  // returns once no continuation runs on another thread either (one the
  // deadline thread or a waker took out just before), so that the transport
  // may stop after it. Never called from inside a continuation.
  void Drain() LMC_EXCLUDES(mu_);

  std::size_t size() const LMC_EXCLUDES(mu_);
  ParkedStats Stats() const LMC_EXCLUDES(mu_);

 private:
  using Id = std::uint64_t;
  struct Entry {
    std::string_view operation;
    std::string connection;
    TimeMs deadline_ms = 0;
    Finish finish;
  };
  ParkedRequests(const Clock* clock, const ParkedLimits& limits);
  void Wake(Id id) LMC_EXCLUDES(mu_);
  // Takes `id` out of every index (it must be parked); returns its entry.
  Entry TakeLocked(Id id) LMC_REQUIRES(mu_);
  void End(std::vector<Entry>& ended, ParkEnd why) LMC_EXCLUDES(mu_);
  void RunDeadlines() LMC_EXCLUDES(mu_);
  // The counts of `operation`, made on first use (no allocation after).
  ParkedOpStats& OpStatsLocked(std::string_view operation) LMC_REQUIRES(mu_);

  const Clock* const clock_;
  const ParkedLimits limits_;
  std::weak_ptr<ParkedRequests> self_;

  mutable Mutex mu_;
  CondVar changed_;  // an earlier deadline, or stop
  CondVar ended_;    // continuations in flight reached 0
  std::size_t ending_ LMC_GUARDED_BY(mu_) = 0;  // continuations taken out, not yet run
  Id next_id_ LMC_GUARDED_BY(mu_) = 0;
  bool draining_ LMC_GUARDED_BY(mu_) = false;
  bool stop_ LMC_GUARDED_BY(mu_) = false;
  std::unordered_map<Id, Entry> entries_ LMC_GUARDED_BY(mu_);
  std::set<std::pair<TimeMs, Id>> deadlines_ LMC_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::unordered_set<Id>> by_connection_ LMC_GUARDED_BY(mu_);
  std::map<std::string, ParkedOpStats, std::less<>> op_stats_ LMC_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace lmcache::server
