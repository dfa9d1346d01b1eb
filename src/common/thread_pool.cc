#include "common/thread_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

namespace lmcache {

ThreadPool::ThreadPool(std::string name, unsigned threads, const FairQueueLimits& limits)
    : name_(std::move(name)), queue_(limits) {
  threads = std::max(1u, threads);
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() { Stop(); }

FairQueue::Admission ThreadPool::Submit(std::uint64_t client, std::size_t bytes,
                                        std::function<void()> task) {
  return queue_.Push(client, bytes, std::move(task));
}

void ThreadPool::Stop() {
  queue_.Stop();
  for (auto& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

void ThreadPool::WorkerLoop() {
  while (std::optional<FairQueue::Task> task = queue_.Pop()) {
    try {
      (*task)();
    } catch (const std::exception& e) {
      spdlog::error("{}: task threw (the worker goes on): {}", name_, e.what());
    } catch (...) {
      spdlog::error("{}: task threw an unknown exception (the worker goes on)", name_);
    }
  }
}

AffinityPool::AffinityPool(std::string name, unsigned threads,
                           const FairQueueLimits& limits_per_lane) {
  threads = std::max(1u, threads);
  for (unsigned i = 0; i < threads; ++i) {
    lanes_.push_back(
        std::make_unique<ThreadPool>(name + "-" + std::to_string(i), 1, limits_per_lane));
  }
}

FairQueue::Admission AffinityPool::Submit(std::uint64_t affinity_key, std::size_t bytes,
                                          std::function<void()> task) {
  return lanes_[affinity_key % lanes_.size()]->Submit(affinity_key, bytes, std::move(task));
}

void AffinityPool::Stop() {
  for (auto& lane : lanes_) lane->Stop();
}

FairQueueStats AffinityPool::Stats() const {
  FairQueueStats total;
  for (const auto& lane : lanes_) {
    const FairQueueStats s = lane->Stats();
    total.tasks += s.tasks;
    total.bytes += s.bytes;
    total.clients += s.clients;
    total.refused_client_full += s.refused_client_full;
    total.refused_server_full += s.refused_server_full;
  }
  return total;
}

}  // namespace lmcache
