// The metrics reference (docs/metrics.md), generated from the stats schema
// (server/stats_schema.h) and the HTTP endpoint's own metrics, so the doc
// lists exactly what /metrics and `stats` serve. metrics_doc_test fails when
// the checked-in file differs; `tools/dev.sh metrics-doc` rewrites it.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

namespace lmcache::admin_http {

std::string RenderMetricsDoc();

}  // namespace lmcache::admin_http
