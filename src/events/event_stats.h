// The KV event channel's figures, each declared once (stats/declare.h):
// its log, its recorder, and the vLLM-format publisher (counted by
// VllmPublisherCounters).
//
// Thread-safety: plain values; the generated counter set is relaxed atomics.
#pragma once

#include <cstdint>
#include <span>

#include "stats/declare.h"

namespace lmcache::events {

// KvEventLogStats's figures, each declared once (stats/declare.h).
#define LMC_KV_EVENT_LOG_STATS(X, D) \
  X(enabled, "enabled", bool, kGauge, "bool", "kv_events_enabled", "1 when the KV event " \
      "channel records (--kv-event-log-size above 0).") \
  X(recording, "recording", bool, kGauge, "bool", "kv_events_recording", \
      "1 once the channel records: from the first poll_kv_events, or from startup with " \
      "--kv-events-url (until then stores pay nothing for KV events).") \
  X(incarnation, "incarnation", std::uint64_t, kGauge, "nanoseconds", \
      "kv_events_incarnation", "This log's incarnation (wall clock at startup); a reader " \
      "that sees it change forgets what it learned.") \
  X(depth, "log_depth", std::uint64_t, kGauge, "records", "kv_events_log_depth", \
      "Records the KV event log holds.", {}, stats::kEverywhere, {}, stats::kReference) \
  X(bytes, "log_bytes", std::uint64_t, kGauge, "bytes", "kv_events_log_bytes", \
      "Memory the KV event log holds.") \
  X(capacity, "log_capacity", std::uint64_t, kGauge, "records", "kv_events_log_capacity", \
      "Records the log keeps at most (--kv-event-log-size).") \
  X(next_seq, "next_seq", std::uint64_t, kGauge, "records", "kv_events_next_seq", \
      "Sequence number of the next record (records since startup + 1).") \
  X(appended, "recorded", std::uint64_t, kCounter, "records", "kv_events_recorded_total", \
      "Records appended to the KV event log.") \
  X(dropped, "dropped", std::uint64_t, kCounter, "records", "kv_events_dropped_total", \
      "Records the log's bounds pushed out; a reader that had not read them is told it lost " \
      "records.") \
  X(watchers, "subscribers", std::uint64_t, kGauge, "subscribers", "kv_events_subscribers", \
      "Readers woken by new records (the streams' sender and the vLLM-format publisher).")

struct KvEventLogStats {
  // A log that has recorded nothing numbers its first record 1.
  KvEventLogStats() { next_seq = 1; }
  LMC_STATS_MEMBERS(LMC_KV_EVENT_LOG_STATS)
  std::uint64_t capacity_bytes = 0;
};
std::span<const stats::Row<KvEventLogStats>> KvEventLogStatRows();

// KvEventRecorderStats's figures, each declared once (stats/declare.h).
#define LMC_KV_EVENT_RECORDER_STATS(X, D) \
  X(unbound_stores, "unbound_stores", std::uint64_t, kCounter, "chunks", \
      "kv_events_unbound_stores_total", "Chunks admitted to L1 without known tokens (loaded " \
      "from L2 with no lookup naming them, or their binding was evicted): no stored record.") \
  X(binding_bytes, "token_binding_bytes", std::uint64_t, kGauge, "bytes", \
      "kv_events_token_binding_bytes", "Memory holding the tokens of recently stored chunks " \
      "(--kv-event-token-cache-mb).")

struct KvEventRecorderStats {
  LMC_STATS_MEMBERS(LMC_KV_EVENT_RECORDER_STATS)
};
std::span<const stats::Row<KvEventRecorderStats>> KvEventRecorderStatRows();
LMC_STATS_COUNTED(KvEventRecorderCounters, KvEventRecorderStats, LMC_KV_EVENT_RECORDER_STATS);

// VllmPublisherStats's figures, each declared once (stats/declare.h).
#define LMC_VLLM_PUBLISHER_STATS(X, D) \
  X(messages, "published_messages", std::uint64_t, kCounter, "messages", \
      "kv_events_published_messages_total", "vLLM-format messages sent on --kv-events-url.") \
  X(events, "published_events", std::uint64_t, kCounter, "events", \
      "kv_events_published_total", "vLLM-format events sent on --kv-events-url.") \
  X(clears_for_loss, "published_clears_for_loss", std::uint64_t, kCounter, "messages", \
      "kv_events_published_clears_for_loss_total", "AllBlocksCleared sent because the log " \
      "dropped records the publisher had not sent.") \
  X(replays, "replays", std::uint64_t, kCounter, "requests", "kv_events_replays_total", \
      "Replay requests answered on --kv-events-replay-url.")

struct VllmPublisherStats {
  LMC_STATS_MEMBERS(LMC_VLLM_PUBLISHER_STATS)
};
std::span<const stats::Row<VllmPublisherStats>> VllmPublisherStatRows();
LMC_STATS_COUNTERS(VllmPublisherCounters, VllmPublisherStats, LMC_VLLM_PUBLISHER_STATS);

}  // namespace lmcache::events
