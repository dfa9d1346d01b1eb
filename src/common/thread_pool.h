// ThreadPool and AffinityPool: fixed sets of worker threads fed by queues.
//
// ThreadPool runs tasks in FIFO order on any of its threads. AffinityPool has
// one single-threaded queue per thread and routes a task by an affinity key,
// so all tasks of one key (one client) run in order on one thread. Queues are
// bounded: Submit() refuses work (returns false) when the queue is full, so an
// overloaded server answers "unavailable" instead of growing without limit.
// A task that throws is logged and counted; the worker thread goes on.
//
// Thread-safety: Submit may be called from any thread; Stop from the owner.
// Stop drains the tasks already queued, then joins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace lmcache {

class ThreadPool {
 public:
  ThreadPool(std::string name, unsigned threads, std::size_t max_queue);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  bool Submit(std::function<void()> task) LMC_EXCLUDES(mu_);
  void Stop() LMC_EXCLUDES(mu_);
  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }

 private:
  void WorkerLoop();

  const std::string name_;
  const std::size_t max_queue_;
  Mutex mu_;
  CondVar ready_;
  std::deque<std::function<void()>> queue_ LMC_GUARDED_BY(mu_);
  bool stopping_ LMC_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

class AffinityPool {
 public:
  AffinityPool(std::string name, unsigned threads, std::size_t max_queue_per_thread);
  // The same key always lands on the same thread.
  bool Submit(std::uint64_t affinity_key, std::function<void()> task);
  void Stop();

 private:
  std::vector<std::unique_ptr<ThreadPool>> lanes_;
};

}  // namespace lmcache
