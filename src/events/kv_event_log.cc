#include "events/kv_event_log.h"

#include <algorithm>
#include <chrono>

namespace lmcache::events {

std::string_view KindName(KvEventKind kind) {
  switch (kind) {
    case KvEventKind::kStored: return "stored";
    case KvEventKind::kRemoved: return "removed";
    case KvEventKind::kCleared: return "cleared";
  }
  return "?";
}

std::size_t KvEvent::Bytes() const {
  return sizeof(KvEvent) + medium.size() + location.size() + model_name.size() + tenant.size() +
         block_hashes.size() * sizeof(store::ChunkHash) + token_ids().size() * sizeof(std::uint32_t);
}

namespace {

std::uint64_t WallClockNanoseconds() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

KvEventLog::KvEventLog(const KvEventLogConfig& config, std::uint64_t incarnation)
    : config_(config), incarnation_(incarnation != 0 ? incarnation : WallClockNanoseconds()) {}

void KvEventLog::Append(std::vector<KvEvent> events) {
  if (!recording() || events.empty()) return;
  std::vector<std::size_t> sizes;
  sizes.reserve(events.size());
  for (const KvEvent& event : events) sizes.push_back(event.Bytes());
  std::vector<KvEvent> trimmed;  // freed after the lock: stores of every lane append here
  {
    MutexLock lock(&mu_);
    for (std::size_t i = 0; i < events.size(); ++i) {
      events[i].seq = next_seq_++;
      bytes_ += sizes[i];
      records_.push_back(std::move(events[i]));
    }
    appended_ += events.size();
    TrimLocked(&trimmed);
  }
  MutexLock lock(&watch_mu_);
  for (auto& [id, wake] : watchers_) wake();
}

void KvEventLog::TrimLocked(std::vector<KvEvent>* trimmed) {
  // The newest record always stays, whatever its size: a reader then sees
  // the loss (its cursor fell behind) rather than an empty log.
  while (records_.size() > 1 &&
         (records_.size() > config_.max_events || bytes_ > config_.max_bytes)) {
    bytes_ -= records_.front().Bytes();
    trimmed->push_back(std::move(records_.front()));
    records_.pop_front();
    ++dropped_;
  }
}

KvEventPage KvEventLog::ReadAfter(std::optional<std::string_view> model, std::uint64_t cursor,
                                  std::size_t max_events) const {
  KvEventPage page;
  page.incarnation = incarnation_;
  if (!enabled()) return page;
  page.enabled = true;
  MutexLock lock(&mu_);
  const std::uint64_t last = next_seq_ - 1;
  const std::uint64_t first = records_.empty() ? last + 1 : records_.front().seq;
  page.lost = cursor + 1 < first || cursor > last;
  page.next_cursor = std::min(cursor, last);
  if (cursor > last) return page;
  for (std::size_t i = cursor + 1 > first ? cursor + 1 - first : 0; i < records_.size(); ++i) {
    const KvEvent& record = records_[i];
    page.next_cursor = record.seq;
    // A clear concerns every model.
    if (model && record.kind != KvEventKind::kCleared && record.model_name != *model) continue;
    page.events.push_back(record);
    if (page.events.size() >= max_events) break;
  }
  return page;
}

KvEventLog::WatchId KvEventLog::Watch(std::function<void()> wake) {
  MutexLock lock(&watch_mu_);
  const WatchId id = next_watch_++;
  watchers_.emplace(id, std::move(wake));
  return id;
}

void KvEventLog::Unwatch(WatchId id) {
  MutexLock lock(&watch_mu_);
  watchers_.erase(id);
}

KvEventLogStats KvEventLog::Stats() {
  KvEventLogStats stats;
  stats.enabled = enabled();
  stats.recording = recording();
  stats.incarnation = incarnation_;
  stats.capacity = config_.max_events;
  stats.capacity_bytes = config_.max_bytes;
  {
    MutexLock lock(&mu_);
    stats.depth = records_.size();
    stats.bytes = bytes_;
    stats.next_seq = next_seq_;
    stats.appended = appended_;
    stats.dropped = dropped_;
  }
  MutexLock lock(&watch_mu_);
  stats.watchers = watchers_.size();
  return stats;
}

LMC_STATS_ROWS(KvEventLogStatRows, KvEventLogStats, LMC_KV_EVENT_LOG_STATS)

}  // namespace lmcache::events
