#include "admin_http/dashboard.h"

#include <httplib.h>

#include "admin_http/dashboard_html.h"  // generated from dashboard.html: kDashboardHtml

namespace lmcache::admin_http {

std::string_view DashboardHtml() { return kDashboardHtml; }

void AddDashboardRoute(RouteTable& routes) {
  routes.Add(HttpMethod::kGet, "/dashboard", Access::kOpen,
             [](const httplib::Request&, httplib::Response& res) {
               // Nothing from anywhere else, and only /status to read.
               res.set_header("Content-Security-Policy",
                              "default-src 'none'; script-src 'unsafe-inline'; style-src "
                              "'unsafe-inline'; connect-src 'self'; base-uri 'none'; "
                              "form-action 'none'; frame-ancestors 'none'");
               res.set_header("Cache-Control", "no-store");
               res.set_content(std::string(kDashboardHtml), "text/html; charset=utf-8");
             });
}

}  // namespace lmcache::admin_http
