// ThreadPool and AffinityPool: fixed sets of worker threads fed by fair queues.
//
// ThreadPool runs tasks on any of its threads, taking them from one
// FairQueue: clients are served round robin, and each client's (and the
// total) queued bytes and tasks are bounded, so a flooding client is refused
// work while the others are still admitted. AffinityPool has one
// single-threaded lane per thread and routes a task by an affinity key, so
// all tasks of one key (one client) run in order on one thread; each lane is
// fair across the clients that share it. A task that throws is logged; the
// worker thread goes on.
//
// Thread-safety: Submit may be called from any thread; Stop from the owner.
// Stop drains the tasks already queued, then joins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/fair_queue.h"

namespace lmcache {

class ThreadPool {
 public:
  ThreadPool(std::string name, unsigned threads, const FairQueueLimits& limits);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task` for `client`; `bytes` is what the task holds while it waits.
  FairQueue::Admission Submit(std::uint64_t client, std::size_t bytes, std::function<void()> task);
  void Stop();
  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }
  FairQueueStats Stats() const { return queue_.Stats(); }

 private:
  void WorkerLoop();

  const std::string name_;
  FairQueue queue_;
  std::vector<std::thread> workers_;
};

class AffinityPool {
 public:
  AffinityPool(std::string name, unsigned threads, const FairQueueLimits& limits_per_lane);
  // The same key always lands on the same thread, in submission order.
  FairQueue::Admission Submit(std::uint64_t affinity_key, std::size_t bytes,
                              std::function<void()> task);
  void Stop();
  FairQueueStats Stats() const;

 private:
  std::vector<std::unique_ptr<ThreadPool>> lanes_;
};

}  // namespace lmcache
