// The operator's page: GET /dashboard serves one self-contained HTML page
// (no script, style, font or image from anywhere but the page itself, which
// its Content-Security-Policy enforces) that reads GET /status every two
// seconds and shows small plots of the last five minutes (L1 usage, lookup
// hit rate, L1 stores, evictions, each L2 tier's and each peer's throughput,
// drawn as inline SVG from the page's own reads), the pool, lookups and hit
// rate, each L2 tier with its
// state and throughput, tenants with their usage against their quotas,
// peers when P2P is on, what failed since the page opened, and every figure
// of the stats reply in one table, walked from the reply itself so a field
// added to the stats schema shows without a change here. Each figure's
// element carries data-field (its path in the stats reply) and data-value
// (the number as reported), which tests/python/test_dashboard.py compares
// with the stats operation's reply in a real headless browser.
//
// Read-only and open, as /status is: it shows nothing /status does not.
//
// Thread-safety: a constant page; the handler runs on the HTTP threads.
#pragma once

#include <string_view>

#include "admin_http/route_table.h"

namespace lmcache::admin_http {

std::string_view DashboardHtml();

void AddDashboardRoute(RouteTable& routes);

}  // namespace lmcache::admin_http
