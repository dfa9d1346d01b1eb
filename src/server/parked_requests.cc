#include "server/parked_requests.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace lmcache::server {
namespace {

// The longest the deadline thread sleeps: a fake clock moved by a test (or
// a deadline parked while it slept) is seen within this.
constexpr TimeMs kMaxSleepMs = 100;

}  // namespace

std::string_view ParkEndName(ParkEnd end) {
  switch (end) {
    case ParkEnd::kWoken:
      return "woken";
    case ParkEnd::kDeadline:
      return "deadline";
    case ParkEnd::kClosed:
      return "closed";
    case ParkEnd::kDrained:
      return "drained";
  }
  return "unknown";
}

std::shared_ptr<ParkedRequests> ParkedRequests::Create(const Clock* clock,
                                                       const ParkedLimits& limits) {
  std::shared_ptr<ParkedRequests> parked(new ParkedRequests(clock, limits));
  parked->self_ = parked;
  parked->thread_ = std::thread([raw = parked.get()] { raw->RunDeadlines(); });
  return parked;
}

ParkedRequests::ParkedRequests(const Clock* clock, const ParkedLimits& limits)
    : clock_(clock), limits_(limits) {}

ParkedRequests::~ParkedRequests() {
  Drain();
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

ParkedOpStats& ParkedRequests::OpStatsLocked(std::string_view operation) {
  auto it = op_stats_.find(operation);
  if (it == op_stats_.end()) it = op_stats_.emplace(std::string(operation), ParkedOpStats{}).first;
  return it->second;
}

void ParkedRequests::Declare(std::string_view operation) {
  MutexLock lock(&mu_);
  OpStatsLocked(operation);
}

Result<ParkedRequests::Waker> ParkedRequests::Park(std::string_view operation,
                                                   std::string_view connection,
                                                   TimeMs deadline_ms, Finish finish) {
  MutexLock lock(&mu_);
  ParkedOpStats& stats = OpStatsLocked(operation);
  if (draining_) {
    stats.refused += 1;
    return Status(ErrorCode::kUnavailable, "the server is stopping: nothing waits any more");
  }
  auto found = by_connection_.find(std::string(connection));
  const std::size_t mine = found == by_connection_.end() ? 0 : found->second.size();
  if (mine >= limits_.per_connection) {
    stats.refused += 1;
    return Status(ErrorCode::kUnavailable,
                  "this client has " + std::to_string(mine) +
                      " requests waiting already; read their replies before sending more");
  }
  if (entries_.size() >= limits_.total) {
    stats.refused += 1;
    return Status(ErrorCode::kUnavailable, "server overloaded: " + std::to_string(entries_.size()) +
                                               " requests are waiting; retry later");
  }
  const Id id = ++next_id_;
  by_connection_[std::string(connection)].insert(id);
  const bool earliest = deadlines_.empty() || deadline_ms < deadlines_.begin()->first;
  deadlines_.emplace(deadline_ms, id);
  entries_.emplace(id, Entry{operation, std::string(connection), deadline_ms, std::move(finish)});
  stats.parked += 1;
  if (earliest) changed_.NotifyOne();
  return Waker([weak = self_, id] {
    if (auto parked = weak.lock()) parked->Wake(id);
  });
}

ParkedRequests::Entry ParkedRequests::TakeLocked(Id id) {
  auto it = entries_.find(id);
  Entry entry = std::move(it->second);
  entries_.erase(it);
  deadlines_.erase({entry.deadline_ms, id});
  auto mine = by_connection_.find(entry.connection);
  if (mine != by_connection_.end()) {
    mine->second.erase(id);
    if (mine->second.empty()) by_connection_.erase(mine);
  }
  return entry;
}

void ParkedRequests::Wake(Id id) {
  std::vector<Entry> ended;
  {
    MutexLock lock(&mu_);
    if (!entries_.contains(id)) return;  // ended already (deadline, close, drain)
    ended.push_back(TakeLocked(id));
    ending_ += 1;
  }
  End(ended, ParkEnd::kWoken);
}

void ParkedRequests::CloseConnection(std::string_view connection) {
  std::vector<Entry> ended;
  {
    MutexLock lock(&mu_);
    auto mine = by_connection_.find(std::string(connection));
    if (mine == by_connection_.end()) return;
    const std::vector<Id> ids(mine->second.begin(), mine->second.end());
    for (const Id id : ids) ended.push_back(TakeLocked(id));
    ending_ += ended.size();
  }
  End(ended, ParkEnd::kClosed);
}

void ParkedRequests::ExpireDue() {
  std::vector<Entry> ended;
  {
    MutexLock lock(&mu_);
    const TimeMs now = clock_->NowMs();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      ended.push_back(TakeLocked(deadlines_.begin()->second));
    }
    ending_ += ended.size();
  }
  End(ended, ParkEnd::kDeadline);
}

void ParkedRequests::Drain() {
  std::vector<Entry> ended;
  {
    MutexLock lock(&mu_);
    draining_ = true;
    while (!entries_.empty()) ended.push_back(TakeLocked(entries_.begin()->first));
    ending_ += ended.size();
  }
  End(ended, ParkEnd::kDrained);
  MutexLock lock(&mu_);
  while (ending_ > 0) ended_.Wait(&lock);
}

void ParkedRequests::End(std::vector<Entry>& ended, ParkEnd why) {
  if (ended.empty()) return;
  {
    MutexLock lock(&mu_);
    for (const Entry& entry : ended) {
      OpStatsLocked(entry.operation).ended[static_cast<std::size_t>(why)] += 1;
    }
  }
  for (Entry& entry : ended) {
    try {
      entry.finish(why);
    } catch (const std::exception& e) {
      // The continuation answers the request; one that throws is a bug, and
      // must cost that request only.
      spdlog::error("{}: a parked request's continuation failed: {}", entry.operation, e.what());
    }
  }
  MutexLock lock(&mu_);
  ending_ -= ended.size();
  if (ending_ == 0) ended_.NotifyAll();
}

void ParkedRequests::RunDeadlines() {
  while (true) {
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      if (deadlines_.empty()) {
        changed_.Wait(&lock);
      } else {
        const TimeMs wait = std::clamp<TimeMs>(deadlines_.begin()->first - clock_->NowMs(), 0,
                                               kMaxSleepMs);
        if (wait > 0) changed_.WaitFor(&lock, std::chrono::milliseconds(wait));
      }
      if (stop_) return;
    }
    ExpireDue();
  }
}

std::size_t ParkedRequests::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

ParkedStats ParkedRequests::Stats() const {
  MutexLock lock(&mu_);
  ParkedStats stats;
  stats.requests = entries_.size();
  stats.by_operation = op_stats_;
  return stats;
}

LMC_STATS_ROWS(ParkedOperationStatRows, ParkedOpStats, LMC_PARKED_OPERATION_STATS)

LMC_STATS_ROWS(ParkedStatRows, ParkedStats, LMC_PARKED_STATS)

}  // namespace lmcache::server
