// The HTTP route table (admin_http/route_table.h), walked on a real
// HttpServer over an in-process Service: every route answers behind the
// gate its row names (open, admin, admin but read-only-safe), every other
// method on a declared path is 405 with the table's Allow (regex paths
// included), an unknown path is 404.
#include "admin_http/route_table.h"

#include <httplib.h>

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "admin_http/health.h"
#include "admin_http/http_server.h"
#include "fakes/service_harness.h"

namespace lmcache::admin_http {
namespace {

constexpr char kToken[] = "route-table-test-token";

httplib::Result Send(httplib::Client& client, std::string_view method, const std::string& path,
                     const httplib::Headers& headers) {
  // A JSON body: what an operator's curl sends; never a simple (cross-site) type.
  const std::string body = "{}";
  const char* type = "application/json";
  if (method == "GET") return client.Get(path, headers);
  if (method == "PUT") return client.Put(path, headers, body, type);
  if (method == "POST") return client.Post(path, headers, body, type);
  if (method == "DELETE") return client.Delete(path, headers, body, type);
  return client.Patch(path, headers, body, type);
}

class RouteTableTest : public ::testing::Test {
 protected:
  void Start(HttpConfig config) {
    config.port = -1;  // any free port
    config.host = "127.0.0.1";
    auto started = HttpServer::Start(config, &harness_.service(), &health_);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    http_ = std::move(started).value();
    health_.SetPhase(Phase::kServing);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
  }
  const std::vector<Route>& Routes() const { return http_->routes().routes(); }

  testing::ServiceHarness harness_;
  testing::FakeClock clock_;
  Health health_{&clock_};
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(RouteTableTest, EveryRouteAnswersBehindTheGateItsRowNames) {
  HttpConfig config;
  config.admin_token = kToken;
  Start(config);
  ASSERT_GE(Routes().size(), 20u);
  const httplib::Headers admin = {{"Authorization", std::string("Bearer ") + kToken}};
  const httplib::Headers wrong = {{"Authorization", "Bearer not-the-token"}};
  for (const Route& route : Routes()) {
    const std::string what = std::string(MethodName(route.method)) + " " + route.example + " (" +
                             std::string(AccessName(route.access)) + ")";
    auto anonymous = Send(*client_, MethodName(route.method), route.example, {});
    ASSERT_TRUE(anonymous) << what;
    auto forged = Send(*client_, MethodName(route.method), route.example, wrong);
    ASSERT_TRUE(forged) << what;
    auto trusted = Send(*client_, MethodName(route.method), route.example, admin);
    ASSERT_TRUE(trusted) << what;
    EXPECT_NE(trusted->status, 401) << what;
    EXPECT_NE(trusted->status, 403) << what << ": " << trusted->body;
    EXPECT_NE(trusted->status, 405) << what << ": the route's own method";
    if (route.access == Access::kOpen) {
      EXPECT_NE(anonymous->status, 401) << what;
      EXPECT_NE(anonymous->status, 403) << what;
    } else {
      EXPECT_EQ(anonymous->status, 401) << what << ": " << anonymous->body;
      EXPECT_EQ(anonymous->get_header_value("WWW-Authenticate"), "Bearer") << what;
      EXPECT_EQ(forged->status, 403) << what;
    }
  }
}

TEST_F(RouteTableTest, ReadOnlyRefusesWhatChangesAndShowsWhatOnlyShows) {
  HttpConfig config;
  config.admin_token = kToken;
  config.read_only = true;
  Start(config);
  const httplib::Headers admin = {{"Authorization", std::string("Bearer ") + kToken}};
  std::size_t refused = 0;
  for (const Route& route : Routes()) {
    const std::string what = std::string(MethodName(route.method)) + " " + route.example;
    auto reply = Send(*client_, MethodName(route.method), route.example, admin);
    ASSERT_TRUE(reply) << what;
    const bool read_only_refusal =
        reply->status == 403 && reply->body.find("--http-read-only") != std::string::npos;
    EXPECT_EQ(read_only_refusal, route.access == Access::kAdmin) << what << ": " << reply->body;
    refused += read_only_refusal;
  }
  EXPECT_GE(refused, 10u);
}

TEST_F(RouteTableTest, EveryOtherMethodOnADeclaredPathIs405WithTheTablesAllow) {
  Start(HttpConfig{});
  std::map<std::string, std::set<std::string>> declared;  // example -> methods
  std::map<std::string, std::string> path_of;
  for (const Route& route : Routes()) {
    declared[route.example].insert(std::string(MethodName(route.method)));
    path_of[route.example] = route.path;
  }
  // Among them the regex paths, which the hand-kept 405 table used to miss.
  EXPECT_TRUE(declared.contains("/config/adapters/fs-2"));
  EXPECT_TRUE(declared.contains("/cache/prefetches/0123abcd"));
  for (const auto& [example, methods] : declared) {
    for (const char* method : {"GET", "PUT", "POST", "DELETE", "PATCH"}) {
      if (methods.contains(method)) continue;
      auto reply = Send(*client_, method, example, {});
      ASSERT_TRUE(reply) << method << " " << example;
      EXPECT_EQ(reply->status, 405) << method << " " << example << ": " << reply->body;
      EXPECT_EQ(reply->get_header_value("Allow"), http_->routes().AllowedOn(path_of[example]))
          << method << " " << example;
    }
  }
  auto unknown = client_->Get("/no/such/route");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
}

TEST(RouteTable, AllowListsTheDeclaredMethodsInOneOrder) {
  RouteTable table;
  auto nothing = [](const httplib::Request&, httplib::Response&) {};
  table.Add(HttpMethod::kDelete, "/a", Access::kAdmin, nothing);
  table.Add(HttpMethod::kGet, "/a", Access::kOpen, nothing);
  table.Add(HttpMethod::kPut, R"(/a/([^/]+))", Access::kAdmin, nothing, "/a/x");
  EXPECT_EQ(table.AllowedOn("/a"), "GET, DELETE");
  EXPECT_EQ(table.AllowedOn(R"(/a/([^/]+))"), "PUT");
  EXPECT_EQ(table.AllowedOn("/b"), "");
  EXPECT_EQ(table.routes()[0].example, "/a");
  EXPECT_EQ(table.routes()[2].example, "/a/x");
}

}  // namespace
}  // namespace lmcache::admin_http
