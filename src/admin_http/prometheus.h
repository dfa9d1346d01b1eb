// Prometheus: the stats snapshot rendered as Prometheus text exposition
// (format 0.0.4), for GET /metrics.
//
// Names follow the reference where a metric means the same thing
// (lmcache_mp_l1_memory_usage_bytes, lmcache_mp_lookup_hit_total, ...); the
// rest are ours under the same prefix. Labels are bounded: the operation
// name (the fixed op table), the L2 adapter ("fs#1"), the admission source.
// docs/metrics.md lists every metric with its type, unit and labels.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "admin_http/health.h"
#include "server/stats.h"

namespace lmcache::ops {

std::string RenderPrometheus(const server::StatsSnapshot& stats, const HealthVerdict& health,
                             Phase phase);

}  // namespace lmcache::ops
