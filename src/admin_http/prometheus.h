// Prometheus: the stats snapshot rendered as Prometheus text exposition
// (format 0.0.4), for GET /metrics: the stats schema (server/stats_schema.h)
// names every family, prometheus-cpp's text serializer writes them (HELP,
// TYPE, escaping, histogram buckets), and the HTTP endpoint adds its own
// state (healthy, draining).
//
// Names follow the reference where a metric means the same thing
// (lmcache_mp_l1_memory_usage_bytes, lmcache_mp_lookup_hit_total, ...); the
// rest are ours under the same prefix. Labels are bounded: the operation
// name (the fixed op table), the L2 adapter's name ("fs-1"), the admission source.
// docs/metrics.md, generated from the same schema, lists every metric.
//
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "admin_http/health.h"
#include "server/stats.h"

namespace lmcache::admin_http {

// Every family's name starts with it.
inline constexpr std::string_view kMetricPrefix = "lmcache_mp_";

// The metrics only the HTTP endpoint knows (not in the stats snapshot).
struct HttpMetric {
  std::string_view name;  // after the `lmcache_mp_` prefix; a gauge
  std::string_view help;
  double (*value)(const HealthVerdict& health, Phase phase);
};
std::span<const HttpMetric> HttpMetrics();

std::string RenderPrometheus(const server::StatsSnapshot& stats, const HealthVerdict& health,
                             Phase phase);

}  // namespace lmcache::admin_http
