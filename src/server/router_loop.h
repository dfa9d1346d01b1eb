// RouterLoop: the ZeroMQ transport. One thread owns every ROUTER socket.
//
// The loop receives [identity, uid, operation, payload...] messages, decodes
// the operation, and runs the request inline (cheap operations), on the
// affinity pool keyed by the client identity (transfers: one client's
// transfers run in order on one thread), or on the CPU pool. Workers never
// touch a socket: they push finished replies onto a queue and wake the loop
// through an eventfd polled beside the sockets. Replies echo the uid and
// operation frames byte for byte and always carry frame 3; a failed request
// carries the operation's failure value in frame 3 and {code, message} in an
// extra frame 4, so every request gets an answer.
//
// Thread-safety: Run() on one thread; Stop() from any thread (also from a
// signal-handling thread). Everything else is private to the loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_pool.h"
#include "common/unique_fd.h"
#include "lmcache/status.h"
#include "server/service.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace lmcache::server {

struct RouterConfig {
  std::vector<std::string> urls;           // tcp://host:port or ipc:///path; at least one
  unsigned affinity_workers = 1;           // --max-gpu-workers
  unsigned cpu_workers = 1;                // --max-cpu-workers
  std::size_t max_queued_requests = 4096;  // per pool lane; beyond it requests get UNAVAILABLE
};

struct RouterStats {
  std::uint64_t received = 0;
  std::uint64_t replied = 0;
  std::uint64_t undeliverable = 0;  // the peer left before its reply
  std::uint64_t rejected = 0;       // answered with an error before dispatch
};

class RouterLoop {
 public:
  // Binds every URL (fails, naming the URL, if one cannot be bound).
  static Result<std::unique_ptr<RouterLoop>> Create(Service* service, const RouterConfig& config);
  ~RouterLoop();
  RouterLoop(const RouterLoop&) = delete;
  RouterLoop& operator=(const RouterLoop&) = delete;

  // Serves until Stop(); then drains the pools and sends their last replies.
  void Run();
  void Stop();
  // The bound endpoints (a tcp port 0 resolved to the real port).
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  RouterStats Stats() const;

 private:
  struct Message;
  struct Outgoing;
  RouterLoop(Service* service, const RouterConfig& config);
  Status Bind(const std::string& url);
  void Receive(std::size_t socket_index);
  void Handle(std::size_t socket_index, std::vector<std::string> frames);
  void Reject(std::size_t socket_index, std::vector<std::string>& frames, const Status& status);
  void Complete(Outgoing reply) LMC_EXCLUDES(outbox_mu_);
  void DrainOutbox() LMC_EXCLUDES(outbox_mu_);
  void Send(Outgoing& reply);

  Service* const service_;
  const RouterConfig config_;
  std::unique_ptr<zmq::context_t> context_;
  std::vector<std::unique_ptr<zmq::socket_t>> sockets_;
  std::vector<std::string> endpoints_;
  std::vector<std::string> ipc_paths_;
  UniqueFd wake_fd_;  // eventfd: replies queued or stop requested
  std::unique_ptr<AffinityPool> affinity_pool_;
  std::unique_ptr<ThreadPool> cpu_pool_;
  std::atomic<bool> stop_{false};

  Mutex outbox_mu_;
  std::deque<Outgoing> outbox_ LMC_GUARDED_BY(outbox_mu_);

  std::atomic<std::uint64_t> received_{0};
  std::atomic<std::uint64_t> replied_{0};
  std::atomic<std::uint64_t> undeliverable_{0};
  std::atomic<std::uint64_t> rejected_{0};
};

}  // namespace lmcache::server
