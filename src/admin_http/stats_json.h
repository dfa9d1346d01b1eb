// The stats snapshot as one JSON object, rendered from the stats schema
// (server/stats_schema.h) like the msgpack `stats` reply and in its shape:
// the same groups, keys and values (histograms as {count, sum_us,
// buckets_us}, or flat beside a row's count), an absent L2 tier as null.
// It adds the figures the reply leaves to Prometheus (ratios and sums such
// as l1.usage_ratio, l2.prefetch.active_jobs), since a human reading
// /status wants them too. GET /status serves it under "stats", so a figure
// declared once reaches /status with no code of its own.
//
// Thread-safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>

#include "server/stats.h"

namespace lmcache::admin_http {

nlohmann::json StatsJson(const server::StatsSnapshot& stats);

}  // namespace lmcache::admin_http
