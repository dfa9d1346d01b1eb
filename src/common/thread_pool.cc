#include "common/thread_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

namespace lmcache {

ThreadPool::ThreadPool(std::string name, unsigned threads, std::size_t max_queue)
    : name_(std::move(name)), max_queue_(max_queue) {
  threads = std::max(1u, threads);
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() { Stop(); }

bool ThreadPool::Submit(std::function<void()> task) {
  {
    MutexLock lock(&mu_);
    if (stopping_ || queue_.size() >= max_queue_) return false;
    queue_.push_back(std::move(task));
  }
  ready_.NotifyOne();
  return true;
}

void ThreadPool::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  ready_.NotifyAll();
  for (auto& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) ready_.Wait(&lock);
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("{}: task threw (the worker goes on): {}", name_, e.what());
    } catch (...) {
      spdlog::error("{}: task threw an unknown exception (the worker goes on)", name_);
    }
  }
}

AffinityPool::AffinityPool(std::string name, unsigned threads, std::size_t max_queue_per_thread) {
  threads = std::max(1u, threads);
  for (unsigned i = 0; i < threads; ++i) {
    lanes_.push_back(
        std::make_unique<ThreadPool>(name + "-" + std::to_string(i), 1, max_queue_per_thread));
  }
}

bool AffinityPool::Submit(std::uint64_t affinity_key, std::function<void()> task) {
  return lanes_[affinity_key % lanes_.size()]->Submit(std::move(task));
}

void AffinityPool::Stop() {
  for (auto& lane : lanes_) lane->Stop();
}

}  // namespace lmcache
