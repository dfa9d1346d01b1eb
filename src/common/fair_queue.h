// FairQueue: tasks queued per client and served round robin, bounded in
// bytes and in count, per client and in total.
//
// A client that floods the server fills its own share and is refused
// (kClientFull) while others keep being admitted and served in turn: a
// well-behaved client waits behind at most one task of each other active
// client, never behind a flooder's whole backlog. The total bounds cap what
// all clients together may queue (kServerFull). Tasks of one client are
// popped in the order they were pushed.
//
// Thread-safety: internally synchronised; Push and Pop from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_map>

#include "common/mutex.h"

namespace lmcache {

struct FairQueueLimits {
  std::size_t client_tasks = 1024;
  std::size_t client_bytes = 64u << 20;
  std::size_t total_tasks = 65536;
  std::size_t total_bytes = 512u << 20;
};

struct FairQueueStats {
  std::size_t tasks = 0;
  std::size_t bytes = 0;
  std::size_t clients = 0;  // clients with queued tasks
  std::uint64_t refused_client_full = 0;
  std::uint64_t refused_server_full = 0;
};

class FairQueue {
 public:
  using Task = std::function<void()>;
  enum class Admission { kQueued, kClientFull, kServerFull, kStopped };

  explicit FairQueue(const FairQueueLimits& limits) : limits_(limits) {}

  // Queues `task` for `client`, counting `bytes` against the limits until it is popped.
  Admission Push(std::uint64_t client, std::size_t bytes, Task task) LMC_EXCLUDES(mu_);
  // The next task in round-robin order across clients; blocks while the queue
  // is empty; nullopt once stopped and drained.
  std::optional<Task> Pop() LMC_EXCLUDES(mu_);
  // Refuses new tasks and wakes every Pop; queued tasks are still handed out.
  void Stop() LMC_EXCLUDES(mu_);
  FairQueueStats Stats() const LMC_EXCLUDES(mu_);

 private:
  struct Item {
    Task task;
    std::size_t bytes = 0;
  };
  struct ClientQueue {
    std::deque<Item> items;
    std::size_t bytes = 0;
  };

  const FairQueueLimits limits_;
  mutable Mutex mu_;
  CondVar ready_;
  std::unordered_map<std::uint64_t, ClientQueue> clients_ LMC_GUARDED_BY(mu_);
  std::deque<std::uint64_t> turn_ LMC_GUARDED_BY(mu_);  // clients with tasks, in serving order
  std::size_t tasks_ LMC_GUARDED_BY(mu_) = 0;
  std::size_t bytes_ LMC_GUARDED_BY(mu_) = 0;
  bool stopped_ LMC_GUARDED_BY(mu_) = false;
  std::uint64_t refused_client_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t refused_server_ LMC_GUARDED_BY(mu_) = 0;
};

}  // namespace lmcache
