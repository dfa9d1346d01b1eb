// Dispatch's figures, each declared once (stats/declare.h): per operation
// (counted by OperationCounters, one per operation row), the parked
// requests (by operation and how they ended), and the subscribe_kv_events
// streams.
//
// Thread-safety: plain values; the generated counter sets are relaxed
// atomics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "common/histogram.h"
#include "stats/declare.h"

namespace lmcache::server {

// How a parked request ended.
enum class ParkEnd : std::uint8_t { kWoken, kDeadline, kClosed, kDrained };
inline constexpr std::size_t kParkEnds = 4;

// OperationStats's figures, each declared once (stats/declare.h). The counts
// are counted by OperationCounters, one per operation row; the
// latency is recorded by a LatencyHistogram beside them.
#define LMC_OPERATION_COUNTED_STATS(X, D) \
  X(requests, "requests", std::uint64_t, kCounter, "requests", "requests_total", \
      "Requests run, by operation (operations called at least once).") \
  X(errors, "errors", std::uint64_t, kCounter, "requests", "request_errors_total", \
      "Requests that failed, by operation.")
#define LMC_OPERATION_STATS(X, D) \
  LMC_OPERATION_COUNTED_STATS(X, D) \
  X(latency, "latency", LatencyHistogram::Snapshot, kHistogram, "µs (seconds in Prometheus)", \
      "request_duration_seconds", "Time to run a request, by operation (buckets 50 us to 10 " \
      "s).", {}, stats::kEverywhere, stats::kFlatForm)

struct OperationStats {
  std::string name;
  LMC_STATS_MEMBERS(LMC_OPERATION_STATS)
};
std::span<const stats::Row<OperationStats>> OperationStatRows();
LMC_STATS_COUNTERS(OperationCounters, OperationStats, LMC_OPERATION_COUNTED_STATS);

// ParkedOpStats's figures, each declared once (stats/declare.h).
#define LMC_PARKED_OPERATION_STATS(X, D) \
  X(parked, "parked", std::uint64_t, kCounter, "requests", "parked_total", \
      "Requests parked to answer later, by operation.") \
  X(refused, "refused", std::uint64_t, kCounter, "requests", "parked_refused_total", \
      "Requests answered 402 at once because their client had 64 requests parked (or the " \
      "server 65,536), by operation.") \
  D(ended[static_cast<std::size_t>(ParkEnd::kWoken)], "woken", kCounter, "requests", \
      "parked_ended_total", "Parked requests answered, by operation and why (woken: what " \
      "they waited for came; deadline: their timeout passed, a deadline miss; closed: their " \
      "client went; drained: the server stopped).", {"end", "woken"}) \
  D(ended[static_cast<std::size_t>(ParkEnd::kDeadline)], "deadline", kCounter, "requests", \
      "parked_ended_total", "", {"end", "deadline"}) \
  D(ended[static_cast<std::size_t>(ParkEnd::kClosed)], "closed", kCounter, "requests", \
      "parked_ended_total", "", {"end", "closed"}) \
  D(ended[static_cast<std::size_t>(ParkEnd::kDrained)], "drained", kCounter, "requests", \
      "parked_ended_total", "", {"end", "drained"})

struct ParkedOpStats {
  LMC_STATS_MEMBERS(LMC_PARKED_OPERATION_STATS)
  std::uint64_t ended[kParkEnds] = {};  // by ParkEnd
};
std::span<const stats::Row<ParkedOpStats>> ParkedOperationStatRows();

// ParkedStats's figures, each declared once (stats/declare.h).
#define LMC_PARKED_STATS(X, D) \
  X(requests, "requests", std::uint64_t, kGauge, "requests", "parked_requests", \
      "Requests waiting without a thread now (deferred replies: a wait_prefetch_status on a " \
      "prefetch still loading).")

struct ParkedStats {
  LMC_STATS_MEMBERS(LMC_PARKED_STATS)
  std::map<std::string, ParkedOpStats, std::less<>> by_operation;
};
std::span<const stats::Row<ParkedStats>> ParkedStatRows();

// KvEventStreamStats's figures, each declared once (stats/declare.h).
#define LMC_KV_EVENT_STREAM_STATS(X, D) \
  X(open, "streams", std::uint64_t, kGauge, "streams", "kv_events_streams", \
      "subscribe_kv_events streams open now.") \
  X(opened, "streams_opened", std::uint64_t, kCounter, "streams", \
      "kv_events_streams_opened_total", "subscribe_kv_events streams opened since startup.") \
  X(batches, "stream_batches", std::uint64_t, kCounter, "batches", \
      "kv_events_stream_batches_total", "Batches sent on subscribe_kv_events streams (their " \
      "status batches included).") \
  X(stale_controls, "stale_stream_controls", std::uint64_t, kCounter, "frames", \
      "kv_events_stale_stream_controls_total", \
      "Acks or cancels for a stream that had already ended.")

struct KvEventStreamStats {
  LMC_STATS_MEMBERS(LMC_KV_EVENT_STREAM_STATS)
};
std::span<const stats::Row<KvEventStreamStats>> KvEventStreamStatRows();
LMC_STATS_COUNTED(KvEventStreamCounters, KvEventStreamStats, LMC_KV_EVENT_STREAM_STATS);

}  // namespace lmcache::server
