// The transport's figures, each declared once (stats/declare.h): those the
// router counts (TransportCounters) and its queues' depth.
//
// Thread-safety: plain values; the generated counter set is relaxed atomics.
#pragma once

#include <cstdint>
#include <span>

#include "stats/declare.h"

namespace lmcache::transport {

// TransportStats's figures, each declared once (stats/declare.h): those the
// router counts, and its queues' depth.
#define LMC_TRANSPORT_QUEUE_STATS(X, D) \
  X(queued_requests, "queued_requests", std::uint64_t, kGauge, "requests", \
      "router_queued_requests", "Requests waiting in the worker pools.") \
  X(queued_bytes, "queued_bytes", std::uint64_t, kGauge, "bytes", "router_queued_bytes", \
      "Bytes of requests waiting in the worker pools.")

#define LMC_TRANSPORT_COUNTED_STATS(X, D) \
  X(received, "received", std::uint64_t, kCounter, "requests", "requests_received_total", \
      "Requests the transport received.") \
  X(replied, "replied", std::uint64_t, kCounter, "replies", "replies_total", \
      "Replies the transport sent.") \
  X(undeliverable, "undeliverable", std::uint64_t, kCounter, "replies", \
      "replies_undeliverable_total", "Replies whose client had gone.") \
  X(refused, "refused", std::uint64_t, kCounter, "requests", "requests_refused_total", \
      "Requests answered with an error before running (bad frames, unknown operation, " \
      "overload).") \
  X(stream_items, "stream_items", std::uint64_t, kCounter, "replies", "stream_items_total", \
      "Items of streaming operations sent (each batch of a subscribe_kv_events stream).") \
  X(stream_controls, "stream_controls", std::uint64_t, kCounter, "frames", \
      "stream_controls_total", "Stream control frames (ack, cancel) received.") \
  X(bad_controls, "bad_stream_controls", std::uint64_t, kCounter, "requests", \
      "bad_stream_controls_total", "Requests with an empty operation frame that were no " \
      "stream control (ack, cancel): answered as malformed (101), and counted in refused " \
      "too.") \
  X(overloaded, "overloaded", std::uint64_t, kCounter, "requests", \
      "requests_overloaded_total", "Requests refused because a queue was full (402).") \
  X(connections, "connections", std::uint64_t, kGauge, "connections", "connections", \
      "Client connections open.") \
  X(disconnects, "disconnects", std::uint64_t, kCounter, "connections", "disconnects_total", \
      "Client connections that closed.") \
  X(refused_users, "refused_users", std::uint64_t, kCounter, "requests", \
      "requests_refused_other_user_total", "Requests refused because they came over loopback " \
      "TCP from a process of another local user than the server's (--allow-uids admits " \
      "others).") \
  X(accept_failures, "accept_failures", std::uint64_t, kCounter, "connections", \
      "accept_failures_total", "Connections an endpoint could not accept (out of file " \
      "descriptors, EMFILE): /healthcheck fails for 10 s after each.") \
  X(capped_connections, "capped_connections", std::uint64_t, kCounter, "connections", \
      "connections_capped_total", "Connections to the fleet endpoint shut at once because " \
      "their source address already held --p2p-max-connections-per-source.") \
  X(fleet_admitted, "fleet_admitted", std::uint64_t, kCounter, "handshakes", \
      "fleet_handshakes_admitted_total", "Connections to the fleet endpoint (--p2p-listen-url) " \
      "that proved the fleet key.") \
  X(fleet_refused, "fleet_refused", std::uint64_t, kCounter, "handshakes", \
      "fleet_handshakes_refused_total", "Connections to the fleet endpoint refused: the " \
      "client did not prove the fleet key (--p2p-auth-key-file).")

struct TransportStats {
  LMC_STATS_MEMBERS(LMC_TRANSPORT_COUNTED_STATS)
  LMC_STATS_MEMBERS(LMC_TRANSPORT_QUEUE_STATS)  // measured at the snapshot, not counted
};
std::span<const stats::Row<TransportStats>> TransportCountedStatRows();
std::span<const stats::Row<TransportStats>> TransportQueueStatRows();
LMC_STATS_COUNTERS(TransportCounters, TransportStats, LMC_TRANSPORT_COUNTED_STATS);

}  // namespace lmcache::transport
