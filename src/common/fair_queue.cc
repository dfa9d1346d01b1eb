#include "common/fair_queue.h"

namespace lmcache {

FairQueue::Admission FairQueue::Push(std::uint64_t client, std::size_t bytes, Task task) {
  {
    MutexLock lock(&mu_);
    if (stopped_) return Admission::kStopped;
    ClientQueue& queue = clients_[client];
    if (queue.items.size() >= limits_.client_tasks || queue.bytes + bytes > limits_.client_bytes) {
      if (queue.items.empty()) clients_.erase(client);
      refused_client_ += 1;
      return Admission::kClientFull;
    }
    if (tasks_ >= limits_.total_tasks || bytes_ + bytes > limits_.total_bytes) {
      if (queue.items.empty()) clients_.erase(client);
      refused_server_ += 1;
      return Admission::kServerFull;
    }
    if (queue.items.empty()) turn_.push_back(client);
    queue.items.push_back({std::move(task), bytes});
    queue.bytes += bytes;
    tasks_ += 1;
    bytes_ += bytes;
  }
  ready_.NotifyOne();
  return Admission::kQueued;
}

std::optional<FairQueue::Task> FairQueue::Pop() {
  MutexLock lock(&mu_);
  while (turn_.empty() && !stopped_) ready_.Wait(&lock);
  if (turn_.empty()) return std::nullopt;  // stopped and drained
  const std::uint64_t client = turn_.front();
  turn_.pop_front();
  auto it = clients_.find(client);
  Item item = std::move(it->second.items.front());
  it->second.items.pop_front();
  it->second.bytes -= item.bytes;
  tasks_ -= 1;
  bytes_ -= item.bytes;
  if (it->second.items.empty()) {
    clients_.erase(it);
  } else {
    turn_.push_back(client);  // its next task waits for everyone else's turn
  }
  return std::move(item.task);
}

void FairQueue::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
  ready_.NotifyAll();
}

FairQueueStats FairQueue::Stats() const {
  MutexLock lock(&mu_);
  return {tasks_, bytes_, clients_.size(), refused_client_, refused_server_};
}

}  // namespace lmcache
