#include "admin_http/prefetch_routes.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "admin_http/key_selection.h"
#include "admin_http/route_helpers.h"
#include "server/service.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

}  // namespace

Result<server::WarmRequest> WarmRequestFromBody(const std::string& body) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return InvalidArgument("expected {\"model_name\", \"world_size\", \"token_ids\", \"cache_salt\"}");
  }
  server::WarmRequest request;
  LMC_ASSIGN_OR_RETURN(request.model_name, StringField(parsed, "model_name", nullptr));
  LMC_ASSIGN_OR_RETURN(request.cache_salt, StringField(parsed, "cache_salt", ""));
  if (const auto world = parsed.find("world_size"); world != parsed.end()) {
    if (!world->is_number_integer()) return InvalidArgument("world_size must be an integer");
    request.world_size = world->get<std::int64_t>();
  }
  const auto tokens = parsed.find("token_ids");
  if (tokens == parsed.end() || !tokens->is_array()) {
    return InvalidArgument("token_ids must be an array of integers");
  }
  if (tokens->size() > server::WarmPrefetches::kMaxTokens) {
    return InvalidArgument("at most " + std::to_string(server::WarmPrefetches::kMaxTokens) +
                           " token_ids per prefetch");
  }
  for (const json& t : *tokens) {
    if (!t.is_number_unsigned() || t.get<std::uint64_t>() > UINT32_MAX) {
      return InvalidArgument("token_ids must be integers in [0, 2^32)");
    }
    request.token_ids.push_back(t.get<std::uint32_t>());
  }
  if (const auto tags = parsed.find("tags"); tags != parsed.end() && !tags->is_null()) {
    if (!tags->is_object()) return InvalidArgument("tags must be an object of strings");
    for (const auto& [name, value] : tags->items()) {
      if (!value.is_string()) return InvalidArgument("tags must be an object of strings");
      request.tags[name] = value.get<std::string>();
    }
  }
  return request;
}

void AddPrefetchRoutes(RouteTable& routes, server::Service& service) {
  routes.Add(HttpMethod::kPost, "/cache/prefetches", Access::kAdmin,
             [&service](const httplib::Request& req, httplib::Response& res) {
               auto request = WarmRequestFromBody(req.body);
               if (!request.ok()) return Error(res, 400, request.status().message());
               auto submitted = service.warm_prefetches().Submit(*request);
               if (!submitted.ok()) {
                 return Error(res, HttpStatusOf(submitted.status()), submitted.status().message());
               }
               Reply(res, 202,
                     {{"request_id", submitted->request_id},
                      {"chunks", submitted->chunks},
                      {"status", submitted->noop ? "noop" : "submitted"}});
             });
  // A prefetch's id is 128 random bits: knowing it is the right to read its result.
  routes.Add(
      HttpMethod::kGet, R"(/cache/prefetches/([0-9a-f]+))", Access::kOpen,
      [&service](const httplib::Request& req, httplib::Response& res) {
        const std::string id = req.matches[1];
        const auto progress = service.warm_prefetches().Take(id);
        if (!progress) {
          return Error(res, 404,
                       "no prefetch " + id + " (unknown, or its result was read already)");
        }
        if (!progress->done) return Reply(res, 200, {{"status", "pending"}, {"request_id", id}});
        Reply(res, 200,
              {{"status", "completed"},
               {"request_id", id},
               {"found_keys", progress->found_keys},
               {"total_keys", progress->total_keys}});
      },
      "/cache/prefetches/0123abcd");
}

}  // namespace lmcache::admin_http
