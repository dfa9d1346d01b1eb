#include "fleet/peer_tasks.h"

#include <algorithm>

#include <utility>

namespace lmcache::fleet {

LMC_STATS_ROWS(PeerTaskStatRows, PeerTaskStats, LMC_PEER_TASK_STATS)

PeerTasks::PeerTasks(store::ObjectTable* table, const Clock* clock, PeerTaskConfig config)
    : table_(table), clock_(clock), config_(config), next_task_id_(config.first_task_id) {}

PeerTasks::~PeerTasks() {
  MutexLock lock(&mu_);
  for (auto& [name, peer] : peers_) {
    while (!peer.tasks.empty()) EndTask(peer, peer.tasks.begin());
  }
}

std::int64_t PeerTasks::Lookup(const std::string& peer_name, std::span<const RequestedObject> keys,
                               bool trusted) {
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  counters_.requested_keys.fetch_add(keys.size(), std::memory_order_relaxed);
  MutexLock lock(&mu_);
  Peer& peer = peers_[peer_name];
  Task task;
  task.id = next_task_id_++;
  task.created_ms = clock_->NowMs();
  task.key_count = keys.size();
  const std::int64_t id = task.id;
  if (!trusted) {
    // Nothing kept per key for a caller that did not prove the key.
    counters_.untrusted_keys.fetch_add(keys.size(), std::memory_order_relaxed);
  } else if (peer.tasks.size() >= config_.max_tasks_per_peer || tasks_ >= config_.max_tasks_total) {
    counters_.refused_keys.fetch_add(keys.size(), std::memory_order_relaxed);
  } else {
    task.addresses.assign(keys.size(), protocol::P2pAddress{});
    LockKeys(peer, task, keys);
    if (task.locked.empty()) task.addresses = {};  // all misses: made again when queried
  }
  // The table stays bounded even for a peer that never queries: past its
  // bound, its oldest task holding no lock makes room (its results are then
  // unknown to that peer, as a reaped task's are).
  if (peer.tasks.size() >= config_.max_tasks_per_peer) {
    auto lockless = std::find_if(peer.tasks.begin(), peer.tasks.end(),
                                 [](const Task& held) { return held.locked.empty(); });
    if (lockless != peer.tasks.end()) {
      EndTask(peer, lockless);
      counters_.displaced_tasks.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (tasks_ >= config_.max_tasks_total) {
    // Every peer together at the bound: this task is not kept (its query
    // answers that it is unknown, as for a reaped one).
    counters_.displaced_tasks.fetch_add(1, std::memory_order_relaxed);
    if (peer.tasks.empty()) peers_.erase(peer_name);
    return id;
  }
  peer.tasks.push_back(std::move(task));
  tasks_ += 1;
  peer_of_task_.emplace(id, peer_name);
  return id;
}

// One lock per distinct key (a duplicate gets the same address), one lease
// for the task.
void PeerTasks::LockKeys(Peer& peer, Task& task, std::span<const RequestedObject> keys) {
  const store::Owner owner = store::Owner::Peer(next_serial_++);
  std::unordered_map<store::ObjectKey, std::size_t, store::ObjectKeyHash> first_position;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const store::ObjectKey& key = keys[i].key;
    if (keys[i].expected_bytes == kUnservable) {
      counters_.unservable_keys.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (auto [it, fresh] = first_position.emplace(key, i); !fresh) {
      task.addresses[i] = task.addresses[it->second];
      continue;
    }
    store::ReadRequest request;
    request.keys = std::span(&key, 1);
    request.owner = owner;
    request.extend = task.lease;
    Result<store::ReadAcquisition> read = table_->AcquireRead(request);
    if (!read.ok() || read->granted == 0) continue;  // not resident (or not readable)
    task.lease = read->lease;
    const store::ReadGrant& grant = read->grants[0];
    const bool wrong_size = keys[i].expected_bytes != 0 && grant.size != keys[i].expected_bytes;
    const bool over_bound = peer.locked_bytes + grant.size > config_.max_locked_bytes_per_peer ||
                            locked_bytes_ + grant.size > config_.max_locked_bytes_total;
    if (wrong_size || over_bound) {
      table_->ReleaseRead(task.lease, request.keys, 1);
      (wrong_size ? counters_.size_mismatches : counters_.refused_keys)
          .fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    task.locked.emplace(key, Range{grant.offset, grant.size});
    task.sizes_by_offset.emplace(grant.offset, grant.size);
    task.locked_bytes += grant.size;
    peer.locked_bytes += grant.size;
    locked_bytes_ += grant.size;
    task.addresses[i] = {static_cast<std::int64_t>(grant.offset),
                         static_cast<std::int64_t>(grant.size)};
    counters_.hit_keys.fetch_add(1, std::memory_order_relaxed);
  }
}

std::optional<std::vector<protocol::P2pAddress>> PeerTasks::Results(const std::string& peer_name,
                                                                    std::int64_t id) {
  MutexLock lock(&mu_);
  auto peer = peers_.find(peer_name);
  if (peer != peers_.end()) {
    for (auto task = peer->second.tasks.begin(); task != peer->second.tasks.end(); ++task) {
      if (task->id != id || task->queried) continue;
      task->queried = true;
      std::vector<protocol::P2pAddress> addresses = std::move(task->addresses);
      task->addresses = {};
      if (addresses.empty()) addresses.assign(task->key_count, protocol::P2pAddress{});
      if (task->locked.empty()) EndTask(peer->second, task);
      return addresses;
    }
  }
  counters_.unknown_queries.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

std::size_t PeerTasks::Unlock(const std::string& peer_name,
                              std::span<const store::ObjectKey> keys) {
  MutexLock lock(&mu_);
  auto peer = peers_.find(peer_name);
  std::size_t released = 0;
  for (const store::ObjectKey& key : keys) {
    bool found = false;
    if (peer != peers_.end()) {
      auto& tasks = peer->second.tasks;
      // An answered task's lock first (oldest first): a requester unlocks
      // what it learned from a query, and a task never queried (its lookup
      // gave up while the request was on the way) is the reaper's.
      auto holder = std::find_if(tasks.begin(), tasks.end(), [&](const Task& t) {
        return t.queried && t.locked.contains(key);
      });
      if (holder == tasks.end()) {
        holder = std::find_if(tasks.begin(), tasks.end(),
                              [&](const Task& t) { return t.locked.contains(key); });
      }
      if (holder != tasks.end()) {
        ReleaseKey(peer->second, holder, key);
        found = true;
        released += 1;
      }
    }
    if (!found) counters_.stale_unlocks.fetch_add(1, std::memory_order_relaxed);
  }
  counters_.unlocked.fetch_add(released, std::memory_order_relaxed);
  return released;
}

std::size_t PeerTasks::UnlockTask(const std::string& peer_name, std::int64_t id,
                                  std::span<const store::ObjectKey> keys) {
  MutexLock lock(&mu_);
  std::size_t released = 0;
  if (auto peer = peers_.find(peer_name); peer != peers_.end()) {
    for (const store::ObjectKey& key : keys) {
      // Found anew per key: releasing a task's last lock ends it.
      auto task = FindTask(peer->second, id);
      if (task == peer->second.tasks.end()) break;
      if (!task->locked.contains(key)) continue;
      ReleaseKey(peer->second, task, key);
      released += 1;
    }
  }
  counters_.stale_unlocks.fetch_add(keys.size() - released, std::memory_order_relaxed);
  counters_.unlocked.fetch_add(released, std::memory_order_relaxed);
  return released;
}

bool PeerTasks::Holds(std::int64_t id, std::uint64_t offset, std::uint64_t size) const {
  MutexLock lock(&mu_);
  auto name = peer_of_task_.find(id);
  if (name == peer_of_task_.end()) return false;
  auto peer = peers_.find(name->second);
  if (peer == peers_.end()) return false;
  const TimeMs now = clock_->NowMs();
  for (const Task& task : peer->second.tasks) {
    if (task.id != id) continue;
    // Past the read TTL the store has ended the task's lease (its memory may
    // be reused), though the reaper has not forgotten the task yet.
    if (now >= task.created_ms + config_.read_ttl_ms) return false;
    auto held = task.sizes_by_offset.find(offset);
    return held != task.sizes_by_offset.end() && held->second == size;
  }
  return false;
}

void PeerTasks::ReleaseKey(Peer& peer, std::deque<Task>::iterator task,
                           const store::ObjectKey& key) {
  auto held = task->locked.find(key);
  if (held == task->locked.end()) return;  // callers name a key the task holds
  table_->ReleaseRead(task->lease, std::span(&key, 1), 1);
  task->locked_bytes -= held->second.size;
  peer.locked_bytes -= held->second.size;
  locked_bytes_ -= held->second.size;
  task->sizes_by_offset.erase(held->second.offset);
  task->locked.erase(held);
  if (task->locked.empty() && task->queried) EndTask(peer, task);
}

std::deque<PeerTasks::Task>::iterator PeerTasks::FindTask(Peer& peer, std::int64_t id) {
  return std::find_if(peer.tasks.begin(), peer.tasks.end(),
                      [id](const Task& t) { return t.id == id; });
}

bool PeerTasks::EndOne(const std::string& peer_name, std::int64_t id) {
  MutexLock lock(&mu_);
  auto peer = peers_.find(peer_name);
  if (peer == peers_.end()) return false;
  auto task = FindTask(peer->second, id);
  if (task == peer->second.tasks.end()) return false;
  EndTask(peer->second, task);
  if (peer->second.tasks.empty()) peers_.erase(peer);
  counters_.abandoned_tasks.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::size_t PeerTasks::DropPeer(const std::string& peer_name, DropReason why) {
  MutexLock lock(&mu_);
  auto peer = peers_.find(peer_name);
  if (peer == peers_.end()) return 0;
  const std::size_t ended = peer->second.tasks.size();
  while (!peer->second.tasks.empty()) EndTask(peer->second, peer->second.tasks.begin());
  peers_.erase(peer);
  (why == DropReason::kLifeEnded ? counters_.ended_life_tasks : counters_.closed_connection_tasks)
      .fetch_add(ended, std::memory_order_relaxed);
  return ended;
}

std::size_t PeerTasks::Adopt(const std::string& from, const std::string& to) {
  MutexLock lock(&mu_);
  auto source = peers_.find(from);
  if (source == peers_.end() || from == to) return 0;
  Peer moved = std::move(source->second);
  peers_.erase(source);
  Peer& target = peers_[to];
  for (Task& task : moved.tasks) {
    peer_of_task_[task.id] = to;
    target.tasks.push_back(std::move(task));
  }
  target.locked_bytes += moved.locked_bytes;
  return moved.tasks.size();
}

std::size_t PeerTasks::Reap() {
  const TimeMs now = clock_->NowMs();
  MutexLock lock(&mu_);
  std::size_t ended = 0;
  for (auto peer = peers_.begin(); peer != peers_.end();) {
    ended += EndTasksIf(peer->second, now);
    peer = peer->second.tasks.empty() ? peers_.erase(peer) : std::next(peer);
  }
  return ended;
}

// Unqueried past the query timeout (reaped), or anything past the read TTL
// (the store ended its lease already).
std::size_t PeerTasks::EndTasksIf(Peer& peer, TimeMs now) {
  std::size_t ended = 0;
  for (std::size_t i = 0; i < peer.tasks.size();) {
    const Task& task = peer.tasks[i];
    const bool unqueried = !task.queried && now >= task.created_ms + config_.query_timeout_ms;
    const bool expired = now >= task.created_ms + config_.read_ttl_ms;
    if (!unqueried && !expired) {
      ++i;
      continue;
    }
    if (unqueried) counters_.reaped_tasks.fetch_add(1, std::memory_order_relaxed);
    EndTask(peer, peer.tasks.begin() + static_cast<std::ptrdiff_t>(i));  // the next moves to i
    ended += 1;
  }
  return ended;
}

void PeerTasks::EndTask(Peer& peer, std::deque<Task>::iterator task) {
  if (task->lease != store::kNoLease) table_->ReleaseRead(task->lease);
  peer_of_task_.erase(task->id);
  peer.locked_bytes -= task->locked_bytes;
  locked_bytes_ -= task->locked_bytes;
  tasks_ -= 1;
  peer.tasks.erase(task);
}

PeerTaskStats PeerTasks::Stats() const {
  PeerTaskStats stats;
  counters_.CopyTo(&stats);
  MutexLock lock(&mu_);
  for (const auto& [name, peer] : peers_) {
    stats.tasks += peer.tasks.size();
    stats.locked_bytes += peer.locked_bytes;
    for (const Task& task : peer.tasks) stats.locked_objects += task.locked.size();
  }
  return stats;
}

}  // namespace lmcache::fleet
