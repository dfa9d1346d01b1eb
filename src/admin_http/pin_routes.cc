#include "admin_http/pin_routes.h"

#include <httplib.h>

#include "admin_http/key_selection.h"
#include "admin_http/route_helpers.h"
#include "server/service.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

json PinFigures(const store::ObjectTable& table) {
  const store::TableStats stats = table.Stats();
  return {{"pinned_objects", stats.pinned_objects},
          {"pinned_bytes", stats.pinned_bytes},
          {"limit_bytes", table.pinned_limit_bytes()}};
}

void ListPins(const httplib::Request& req, httplib::Response& res, server::Service& service) {
  auto page = ParsePage(req);
  if (!page.ok()) return Error(res, 400, page.status().message());
  std::vector<store::ListedObject> found =
      service.table().ListResident(page->after_key(), page->size + 1, nullptr, /*pinned_only=*/true);
  const bool more = found.size() > page->size;
  if (more) found.resize(page->size);
  json entries = json::array();
  for (const store::ListedObject& o : found) {
    entries.push_back({{"key", EncodedObjectKey(o.key)}, {"size_bytes", o.size_bytes}, {"pins", o.pins}});
  }
  json reply = PinFigures(service.table());
  reply.update({{"entries", std::move(entries)},
                {"next_page_token", more ? json(PageToken(found.back().key)) : json(nullptr)}});
  Reply(res, 200, reply);
}

void PinObjects(const httplib::Request& req, httplib::Response& res, server::Service& service) {
  auto body = JsonObjectBody(req.body);
  if (!body.ok()) return Error(res, 400, body.status().message());
  auto selection =
      ParseSelection(*body, service.state().hasher(), service.state().config().chunk_sizes);
  if (!selection.ok()) return Error(res, 400, selection.status().message());
  store::ObjectTable& table = service.table();
  std::uint64_t pinned = 0, not_resident = 0, over_limit = 0;
  for (const store::PinOutcome outcome : table.Pin(L1Keys(*selection, table))) {
    if (outcome == store::PinOutcome::kPinned) pinned += 1;
    if (outcome == store::PinOutcome::kNotResident) not_resident += 1;
    if (outcome == store::PinOutcome::kOverLimit) over_limit += 1;
  }
  json reply = PinFigures(table);
  reply.update({{"pinned", pinned}, {"not_resident", not_resident}, {"over_limit", over_limit}});
  if (over_limit > 0) {
    reply["error"] = std::to_string(over_limit) +
                     " objects were not pinned: pinned objects would pass --max-pinned-fraction "
                     "of the pool; unpin others first";
    return Reply(res, 409, reply);
  }
  Reply(res, 200, reply);
}

void UnpinObjects(const httplib::Request& req, httplib::Response& res, server::Service& service) {
  auto body = JsonObjectBody(req.body);
  if (!body.ok()) return Error(res, 400, body.status().message());
  auto selection =
      ParseSelection(*body, service.state().hasher(), service.state().config().chunk_sizes);
  if (!selection.ok()) return Error(res, 400, selection.status().message());
  store::ObjectTable& table = service.table();
  std::uint64_t unpinned = 0, not_pinned = 0;
  for (const store::UnpinOutcome outcome : table.Unpin(L1Keys(*selection, table))) {
    (outcome == store::UnpinOutcome::kUnpinned ? unpinned : not_pinned) += 1;
  }
  json reply = PinFigures(table);
  reply.update({{"unpinned", unpinned}, {"not_pinned", not_pinned}});
  Reply(res, 200, reply);
}

}  // namespace

void AddPinRoutes(RouteTable& routes, server::Service& service) {
  routes.Add(HttpMethod::kGet, "/cache/pins", Access::kAdminRead,
             [&service](const httplib::Request& req, httplib::Response& res) {
               ListPins(req, res, service);
             });
  routes.Add(HttpMethod::kPost, "/cache/pins", Access::kAdmin,
             [&service](const httplib::Request& req, httplib::Response& res) {
               PinObjects(req, res, service);
             });
  routes.Add(HttpMethod::kDelete, "/cache/pins", Access::kAdmin,
             [&service](const httplib::Request& req, httplib::Response& res) {
               UnpinObjects(req, res, service);
             });
}

}  // namespace lmcache::admin_http
