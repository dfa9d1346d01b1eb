#include "worker/session.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace lmcache::worker {
namespace {

// Earlier lookups' leases kept consumable per tenant: a scheduler re-running
// a lookup of the same request while its workers still retrieve is rare, so
// a few suffice; older ones are released.
constexpr std::size_t kMaxEarlierLeases = 4;

// Moves what `lookup` holds (its leases, those of earlier lookups, a pending
// prefetch) into `out`, leaving the lookup holding nothing.
void TakeInto(LookupState& lookup, LookupRelease& out) {
  out.leases.insert(out.leases.end(), lookup.leases.begin(), lookup.leases.end());
  out.leases.insert(out.leases.end(), lookup.earlier_leases.begin(), lookup.earlier_leases.end());
  if (lookup.prefetch_pending) out.prefetches.push_back(lookup.prefetch_handle);
  lookup.leases.clear();
  lookup.earlier_leases.clear();
  lookup.prefetch_pending = false;
}

}  // namespace

LookupState* Session::FindLookup(const std::string& salt) {
  auto it = lookups_.find(salt);
  return it == lookups_.end() ? nullptr : &it->second;
}

Result<LookupRelease> Session::BeginLookup(const std::string& salt, std::size_t max_tenants) {
  LookupRelease out;
  std::vector<store::LeaseId>& release = out.leases;
  auto it = lookups_.find(salt);
  if (it == lookups_.end()) {
    if (lookups_.size() >= max_tenants) {
      return Status(ErrorCode::kResourceExhausted,
                    "request id is used by " + std::to_string(lookups_.size()) +
                        " tenants (cache salts) already; use distinct request ids");
    }
    it = lookups_.emplace(salt, LookupState{}).first;
  }
  LookupState& previous = it->second;
  std::vector<store::LeaseId> earlier = std::move(previous.earlier_leases);
  if (previous.status_consumed) {
    // Workers may be retrieving from it.
    earlier.insert(earlier.begin(), previous.leases.begin(), previous.leases.end());
  } else {
    // Nobody saw the result: no worker will retrieve it.
    release.insert(release.end(), previous.leases.begin(), previous.leases.end());
  }
  while (earlier.size() > kMaxEarlierLeases) {
    release.push_back(earlier.back());
    earlier.pop_back();
  }
  if (previous.prefetch_pending) out.prefetches.push_back(previous.prefetch_handle);
  previous = LookupState{};
  previous.sequence = next_sequence_++;
  previous.tenant = salt;
  previous.earlier_leases = std::move(earlier);
  return out;
}

LookupState* Session::StatusLookup() {
  LookupState* oldest_unreported = nullptr;
  LookupState* newest = nullptr;
  for (auto& [salt, lookup] : lookups_) {
    if (!lookup.status_consumed &&
        (oldest_unreported == nullptr || lookup.sequence < oldest_unreported->sequence)) {
      oldest_unreported = &lookup;
    }
    if (newest == nullptr || lookup.sequence > newest->sequence) newest = &lookup;
  }
  return oldest_unreported != nullptr ? oldest_unreported : newest;
}

std::vector<store::LeaseId> Session::ConsumableLeases(const std::string& salt) {
  std::vector<store::LeaseId> leases;
  if (const LookupState* lookup = FindLookup(salt)) {
    leases.insert(leases.end(), lookup->leases.begin(), lookup->leases.end());
    leases.insert(leases.end(), lookup->earlier_leases.begin(), lookup->earlier_leases.end());
  }
  return leases;
}

LookupRelease Session::TakeAll() {
  LookupRelease out;
  for (auto& [salt, lookup] : lookups_) TakeInto(lookup, out);
  return out;
}

LookupRelease Session::TakeConnection(std::string_view connection) {
  LookupRelease out;
  for (auto& [salt, lookup] : lookups_) {
    if (lookup.connection == connection) TakeInto(lookup, out);
  }
  return out;
}

std::vector<LookupState*> Session::Lookups() {
  std::vector<LookupState*> out;
  for (auto& [salt, lookup] : lookups_) out.push_back(&lookup);
  return out;
}

void Session::Account() {
  // A fixed overhead per session and lookup, plus what grows with the prompt.
  std::size_t bytes = 256;
  for (const auto& [salt, lookup] : lookups_) {
    bytes += 192 + salt.size() + lookup.model_name.size() +
             lookup.hashes.capacity() * sizeof(store::ChunkHash) +
             lookup.earlier_leases.capacity() * sizeof(store::LeaseId);
  }
  const std::size_t before = bytes_.exchange(bytes, std::memory_order_relaxed);
  if (total_bytes_ != nullptr && counted_) {
    total_bytes_->fetch_add(bytes, std::memory_order_relaxed);
    total_bytes_->fetch_sub(before, std::memory_order_relaxed);
  }
}

SessionManager::SessionManager(const Clock* clock, const SessionLimits& limits, DropFn on_drop)
    : clock_(clock), limits_(limits), on_drop_(std::move(on_drop)) {}

void SessionManager::UseLocked(Entry& entry, TimeMs now) {
  entry.last_used_ms = now;
  lru_.splice(lru_.end(), lru_, entry.lru);
}

void SessionManager::DropLocked(const std::string& request_id,
                                std::vector<std::shared_ptr<Session>>* dropped) {
  auto it = sessions_.find(request_id);
  if (it == sessions_.end()) return;
  for (const std::string& connection : it->second.connections) {
    auto by = by_connection_.find(connection);
    if (by == by_connection_.end()) continue;
    by->second.erase(request_id);
    if (by->second.empty()) by_connection_.erase(by);
  }
  lru_.erase(it->second.lru);
  dropped->push_back(std::move(it->second.session));
  sessions_.erase(it);
}

void SessionManager::RunDrops(std::vector<std::shared_ptr<Session>>& dropped) {
  for (const std::shared_ptr<Session>& session : dropped) {
    if (on_drop_) on_drop_(*session);
    // Its bytes leave the total with it (a request may still hold it).
    MutexLock lock(&session->mu);
    session->counted_ = false;
    total_bytes_.fetch_sub(session->bytes_.exchange(0, std::memory_order_relaxed),
                           std::memory_order_relaxed);
  }
}

std::shared_ptr<Session> SessionManager::GetOrCreate(const std::string& request_id) {
  std::vector<std::shared_ptr<Session>> dropped;
  std::shared_ptr<Session> session;
  {
    MutexLock lock(&mu_);
    const TimeMs now = clock_->NowMs();
    auto it = sessions_.find(request_id);
    if (it == sessions_.end()) {
      // Make room: the least recently used sessions go first.
      while (!lru_.empty() && sessions_.size() >= limits_.max_sessions) {
        DropLocked(lru_.front(), &dropped);
      }
      session = std::make_shared<Session>(next_serial_.fetch_add(1), &total_bytes_);
      lru_.push_back(request_id);
      it = sessions_.emplace(request_id, Entry{session, now, std::prev(lru_.end()), {}}).first;
    }
    UseLocked(it->second, now);
    session = it->second.session;
  }
  {
    MutexLock lock(&session->mu);
    if (session->bytes() == 0) session->Account();
  }
  RunDrops(dropped);
  return session;
}

std::shared_ptr<Session> SessionManager::Find(const std::string& request_id) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(request_id);
  if (it == sessions_.end()) return nullptr;
  UseLocked(it->second, clock_->NowMs());
  return it->second.session;
}

bool SessionManager::Remove(const std::string& request_id) {
  std::vector<std::shared_ptr<Session>> dropped;
  {
    MutexLock lock(&mu_);
    DropLocked(request_id, &dropped);
  }
  RunDrops(dropped);
  return !dropped.empty();
}

template <typename DropFront>
std::size_t SessionManager::DropFrontInSteps(DropFront drop_front) {
  std::size_t total = 0;
  for (;;) {
    std::vector<std::shared_ptr<Session>> dropped;
    bool more = true;
    {
      MutexLock lock(&mu_);
      while (dropped.size() < kSessionStep && (more = !lru_.empty() && drop_front(dropped))) {
        DropLocked(lru_.front(), &dropped);
      }
    }
    // The step's leases are released, and its sessions freed, with mu_
    // released.
    RunDrops(dropped);
    total += dropped.size();
    if (!more || dropped.empty()) return total;
    LetWaitersIn();
  }
}

void SessionManager::LetWaitersIn() const {
  // std::mutex is not fair: a woken lookup would find mu_ taken again by the
  // next step and sleep on, for as long as a mass expiry lasts (figures in
  // docs/threading.md). Waiters leave the count once they hold it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  while (mu_.waiters() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
}

std::size_t SessionManager::ExpireIdle() {
  const TimeMs now = clock_->NowMs();
  // The LRU order is the order of last use: the idle ones are at the front.
  return DropFrontInSteps([&](const std::vector<std::shared_ptr<Session>>&) {
    mu_.AssertHeld();  // DropFrontInSteps asks with it held
    return now - sessions_.at(lru_.front()).last_used_ms >= limits_.idle_ttl_ms;
  });
}

std::size_t SessionManager::Trim() {
  // The most recently used session (the caller's) stays. The total falls only
  // when a step's drops run, so each step counts what it has taken already.
  std::size_t taken_this_step = 0;
  const std::size_t dropped =
      DropFrontInSteps([&](const std::vector<std::shared_ptr<Session>>& step) {
        mu_.AssertHeld();  // DropFrontInSteps asks with it held
        if (step.empty()) taken_this_step = 0;
        const std::size_t total = total_bytes_.load(std::memory_order_relaxed);
        if (lru_.size() <= 1 || total - std::min(total, taken_this_step) <= limits_.max_bytes) {
          return false;
        }
        taken_this_step += sessions_.at(lru_.front()).session->bytes();
        return true;
      });
  dropped_for_memory_.fetch_add(dropped, std::memory_order_relaxed);
  return dropped;
}

void SessionManager::NoteConnection(const std::string& request_id, std::string_view connection) {
  MutexLock lock(&mu_);
  auto it = sessions_.find(request_id);
  if (it == sessions_.end()) return;
  std::vector<std::string>& connections = it->second.connections;
  if (std::find(connections.begin(), connections.end(), connection) != connections.end()) return;
  connections.emplace_back(connection);
  by_connection_[std::string(connection)].insert(request_id);
}

std::vector<std::shared_ptr<Session>> SessionManager::TakeConnection(std::string_view connection) {
  LetWaitersIn();  // the caller takes steps back to back
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> out;
  auto by = by_connection_.find(std::string(connection));
  if (by == by_connection_.end()) return out;
  std::unordered_set<std::string>& request_ids = by->second;
  while (!request_ids.empty() && out.size() < kSessionStep) {
    auto id = request_ids.begin();
    if (auto it = sessions_.find(*id); it != sessions_.end()) {
      std::erase(it->second.connections, connection);
      out.push_back(it->second.session);
    }
    request_ids.erase(id);
  }
  if (request_ids.empty()) by_connection_.erase(by);
  return out;
}

std::size_t SessionManager::size() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace lmcache::worker
