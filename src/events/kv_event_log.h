// KvEventLog: the server's in-memory log of KV events (kv_event.h), which
// KV-aware routers read to learn what this node's cache holds.
//
// Records are numbered consecutively from 1; the log keeps the newest ones,
// bounded in count (--kv-event-log-size, the reference's 32768) and in bytes
// (--kv-event-log-mb), dropping the oldest. A reader names the last record
// it consumed (its cursor, 0 on first contact) and gets the next page of one
// model's records, with the reference's semantics (KVEventLog.read_after):
// `next_cursor` is the last record scanned (other models' records advance
// it too), and `lost` says records it had not read were dropped, or its
// cursor is ahead of the log (it read a previous incarnation: a server that
// restarted draws a new `incarnation`, and a reader that sees it change
// forgets what it learned).
//
// Watchers (a stream waiting for its next page, the PUB publisher) are
// woken after every append.
//
// Thread-safety: every method from any thread. Append runs on the threads
// of the table's and L2 controllers' callbacks, never under a table lock;
// its critical section copies the records in. Watchers are called under
// the log's watcher mutex (a leaf but for what a wake takes: it must only
// signal), so after Unwatch returns no call of that watcher is running.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "events/event_stats.h"
#include "common/mutex.h"
#include "events/kv_event.h"

namespace lmcache::events {

struct KvEventLogConfig {
  std::size_t max_events = 32768;  // 0: the channel is disabled
  std::size_t max_bytes = 64u << 20;
};

// The reply of a poll (the reference's KVEventPollResult / KVEventBatch).
struct KvEventPage {
  bool enabled = false;
  std::uint64_t incarnation = 0;
  std::uint64_t next_cursor = 0;
  bool lost = false;
  std::vector<KvEvent> events;
};

class KvEventLog {
 public:
  // `incarnation` names this log's life (0: draw one from the wall clock, as
  // the reference does: nanoseconds since the epoch).
  explicit KvEventLog(const KvEventLogConfig& config, std::uint64_t incarnation = 0);
  KvEventLog(const KvEventLog&) = delete;
  KvEventLog& operator=(const KvEventLog&) = delete;

  bool enabled() const { return config_.max_events > 0; }
  // Whether appends are kept (enabled and not paused). A log that nobody
  // reads costs the stores nothing: KvEvents pauses it until its first
  // reader (kv_events.h).
  bool recording() const { return enabled() && recording_.load(std::memory_order_relaxed); }
  void SetRecording(bool on) { recording_.store(on, std::memory_order_relaxed); }
  std::uint64_t incarnation() const { return incarnation_; }

  // Numbers `events` and appends them (nothing when disabled), then wakes
  // every watcher.
  void Append(std::vector<KvEvent> events) LMC_EXCLUDES(mu_, watch_mu_);
  // Up to `max_events` records after `cursor`: of `model` only, or of every
  // model when `model` is nullopt.
  KvEventPage ReadAfter(std::optional<std::string_view> model, std::uint64_t cursor,
                        std::size_t max_events) const LMC_EXCLUDES(mu_);

  using WatchId = std::uint64_t;
  WatchId Watch(std::function<void()> wake) LMC_EXCLUDES(watch_mu_);
  void Unwatch(WatchId id) LMC_EXCLUDES(watch_mu_);

  KvEventLogStats Stats() LMC_EXCLUDES(mu_, watch_mu_);

 private:
  // Drops the oldest records past the bounds into `trimmed` (to be freed
  // after the lock).
  void TrimLocked(std::vector<KvEvent>* trimmed) LMC_REQUIRES(mu_);

  const KvEventLogConfig config_;
  const std::uint64_t incarnation_;
  std::atomic<bool> recording_{true};
  mutable Mutex mu_;
  std::deque<KvEvent> records_ LMC_GUARDED_BY(mu_);
  std::uint64_t bytes_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t next_seq_ LMC_GUARDED_BY(mu_) = 1;
  std::uint64_t appended_ LMC_GUARDED_BY(mu_) = 0;
  std::uint64_t dropped_ LMC_GUARDED_BY(mu_) = 0;

  Mutex watch_mu_;  // never held with mu_
  std::map<WatchId, std::function<void()>> watchers_ LMC_GUARDED_BY(watch_mu_);
  WatchId next_watch_ LMC_GUARDED_BY(watch_mu_) = 1;
};

}  // namespace lmcache::events
