// The stats reply's shape: which component's figures (each declared once,
// next to its code: stats/declare.h) form which group of the reply, and in
// which order. Every exporter renders from this one walk: the msgpack
// `stats` reply (stats.cc), the Prometheus exposition
// (admin_http/prometheus.cc), GET /status (admin_http/status_json.cc) and
// docs/metrics.md (admin_http/metrics_doc.cc). stats_schema_test fails when
// a field would reach one and not another, or two fields would claim one
// Prometheus series; stats_exports_test pins what each writes.
//
// VisitStats walks the reply in order and hands each field to a visitor
// with its value; with no snapshot it walks the schema alone (each repeated
// group once, without values), which is how the docs are made.
//
// Thread-safety: the rows are immutable; VisitStats is a pure function of
// its snapshot.
#pragma once

#include "server/stats.h"
#include "stats/field.h"

namespace lmcache::server {

// Walks `stats` (or, if null, the schema alone) in reply order.
void VisitStats(const StatsSnapshot* stats, stats::Visitor& visitor);

}  // namespace lmcache::server
