// GuardedHttpServer: cpp-httplib's server with the connection handling an
// operator's port needs against slow and flooding clients (issue 62,
// section 5). httplib serves each connection on a pool thread for as long
// as the client keeps it, and times out each read, never a whole request:
// four clients sending a byte every 3 s held both threads of a pool of two,
// and no /healthcheck was answered for 20 s (a liveness probe would have
// restarted the pod and lost the cache).
//
// Here each connection gets a thread of its own (never queued behind a slow
// one), up to `max_connections`, and each request a deadline for reading
// it (from its first byte to its last) and one for writing its reply: a
// client slower than that loses its connection. Admission is by deadline:
// a connection from an address that already holds `fast_only_per_address`
// connections, or arriving while three quarters of `max_connections` are
// taken, gets `fast_deadline` instead (a probe, which sends its request at
// once, is still answered; a trickling client is cut within it); only past
// `max_connections` is a connection closed unanswered. Every connection
// closed early is counted.
//
// Thread-safety: as httplib::Server (Start/Stop from the controlling
// thread); the guard's counters are synchronised.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "stats/declare.h"

namespace lmcache::admin_http {

struct HttpGuardConfig {
  std::size_t max_connections = 256;
  std::size_t fast_only_per_address = 16;
  std::chrono::milliseconds request_deadline{10'000};
  std::chrono::milliseconds fast_deadline{1'000};
  std::chrono::milliseconds idle_timeout{5'000};  // between requests of a kept-alive connection
  std::size_t max_requests_per_connection = 100;
};

// The guard's figures, declared once (stats/declare.h's form): GET /status
// shows them under "http" (the stats schema and /metrics do not carry them).
#define LMC_HTTP_GUARD_STATS(X, D) \
  X(open_connections, "open_connections", std::uint64_t, kGauge, "connections") \
  X(refused_connections, "refused_connections", std::uint64_t, kCounter, "connections") \
  X(fast_only_connections, "fast_only_connections", std::uint64_t, kCounter, "connections") \
  X(deadline_closes, "deadline_closes", std::uint64_t, kCounter, "connections")
// refused: past max_connections, closed unanswered; fast_only: admitted with
// the fast deadline; deadline_closes: a request not read or written in time.

struct HttpGuardStats {
  LMC_STATS_MEMBERS(LMC_HTTP_GUARD_STATS)
};
LMC_STATS_COUNTED(HttpGuardCounters, HttpGuardStats, LMC_HTTP_GUARD_STATS);

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(HttpGuardConfig config);
  ~GuardedHttpServer() override;
  HttpGuardStats GuardStats() const;

  // Runs a few requests through httplib on the calling thread (their
  // replies discarded), so that the statics httplib builds on first use
  // (its method table, its parsers) exist before any connection thread
  // starts: starting a thread orders them before that thread's use. Call it
  // after the routes are added and before listening. Without it two
  // connection threads' first use of such a static are unordered for
  // ThreadSanitizer (httplib is not instrumented), where a pool's queue
  // mutex used to order them.
  void Prime();

 private:
  struct Admission {
    bool admitted = false;
    std::chrono::milliseconds deadline{0};
    std::string address;
  };
  bool process_and_close_socket(socket_t sock) override;
  Admission Admit(socket_t sock) LMC_EXCLUDES(mu_);
  void Release(const std::string& address) LMC_EXCLUDES(mu_);

  const HttpGuardConfig config_;
  mutable Mutex mu_;
  std::size_t open_ LMC_GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, std::size_t> per_address_ LMC_GUARDED_BY(mu_);
  HttpGuardCounters counts_;
};

// A TaskQueue that runs each task (a connection) on a thread of its own;
// shutdown() waits for every one to end.
httplib::TaskQueue* NewThreadPerConnectionQueue();

}  // namespace lmcache::admin_http
