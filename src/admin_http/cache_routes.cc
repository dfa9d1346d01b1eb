#include "admin_http/cache_routes.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "admin_http/key_selection.h"
#include "admin_http/route_helpers.h"
#include "server/service.h"
#include "tier/l2_tier.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

// The cascade now: held while a request reads or deletes through its
// adapters (one removed meanwhile finishes the request first).
tier::L2Cascade::View CascadeOf(tier::L2Tier* l2) {
  return l2 == nullptr ? tier::L2Cascade::View() : l2->cascade().Current();
}

// The positions in `cascade` of the adapters `name` picks: all for "", or
// the one with that name or (1-based) position.
Result<std::vector<std::size_t>> ChooseAdapters(const tier::L2Cascade::View& cascade,
                                                const std::string& name) {
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < cascade.size(); ++i) {
    if (name.empty() || name == cascade.member(i).name || name == std::to_string(i + 1)) {
      chosen.push_back(i);
    }
  }
  if (!name.empty() && chosen.empty()) {
    if (cascade.empty()) {
      return Status(ErrorCode::kNotFound, "no L2 adapter '" + name + "': this server has none");
    }
    return Status(ErrorCode::kNotFound, "no L2 adapter '" + name +
                                            "': name one as GET /config/adapters does (fs#1) or "
                                            "by its position (1)");
  }
  return chosen;
}

void ListObjects(const httplib::Request& req, httplib::Response& res, server::Service& service,
                 tier::L2Tier* l2) {
  const std::string tier = req.has_param("tier") ? req.get_param_value("tier") : "l1";
  if (tier != "l1" && tier != "l2") return Error(res, 400, "tier must be l1 or l2");
  auto parsed_page = ParsePage(req);
  if (!parsed_page.ok()) return Error(res, 400, parsed_page.status().message());
  const std::size_t page_size = parsed_page->size;
  const std::optional<store::ObjectKey>& after = parsed_page->after;
  const std::string model = req.get_param_value("model_name");
  const bool by_salt = req.has_param("cache_salt");
  // `_default` names the empty salt, as in the quota routes.
  const std::string salt = req.get_param_value("cache_salt") == store::kDefaultSaltName
                               ? std::string()
                               : req.get_param_value("cache_salt");
  const tier::L2Adapter::KeyFilter keep = [&](const store::ObjectKey& key) {
    return (model.empty() || key.model_name == model) && (!by_salt || key.cache_salt == salt);
  };
  // One more than the page: whether another page follows.
  std::vector<std::pair<store::ObjectKey, std::uint64_t>> found;
  std::string adapter = "l1";
  if (tier == "l1") {
    for (auto& o : service.table().ListResident(after ? &*after : nullptr, page_size + 1, keep)) {
      found.emplace_back(std::move(o.key), o.size_bytes);
    }
  } else {
    const tier::L2Cascade::View cascade = CascadeOf(l2);
    auto chosen = ChooseAdapters(cascade, req.get_param_value("adapter"));
    if (!chosen.ok()) return Error(res, HttpStatusOf(chosen.status()), chosen.status().message());
    std::optional<Status> refusal;
    bool listed = false;
    for (const std::size_t i : *chosen) {
      const std::string& name = cascade.member(i).name;
      auto page = cascade.adapter(i).List(after ? &*after : nullptr, page_size + 1, keep);
      if (!page.ok()) {
        refusal = Status(page.status().code(), name + ": " + page.status().message());
        continue;
      }
      adapter = name;
      for (auto& o : *page) found.emplace_back(std::move(o.key), o.size_bytes);
      listed = true;
      break;
    }
    if (!listed) {
      if (refusal) return Error(res, HttpStatusOf(*refusal), refusal->message());
      return Error(res, 501, "no L2 adapter here can list what it holds (fs and mock can)");
    }
  }
  const bool more = found.size() > page_size;
  if (more) found.resize(page_size);
  json entries = json::array();
  for (const auto& [key, bytes] : found) {
    entries.push_back({{"key", EncodedObjectKey(key)}, {"size_bytes", bytes}});
  }
  Reply(res, 200,
        {{"adapter", adapter},
         {"entries", std::move(entries)},
         {"next_page_token", more ? json(PageToken(found.back().first)) : json(nullptr)}});
}

struct DeleteRequest {
  KeySelection selection;
  std::string tier = "l2";
  bool force = false;
  std::string adapter;
};

Result<DeleteRequest> ParseDelete(const std::string& body, worker::ChunkHasher& hasher,
                                  const store::ChunkSizes& chunk_sizes) {
  LMC_ASSIGN_OR_RETURN(const json parsed, JsonObjectBody(body));
  DeleteRequest request;
  LMC_ASSIGN_OR_RETURN(request.tier, StringField(parsed, "tier", "l2"));
  if (request.tier != "l1" && request.tier != "l2" && request.tier != "all") {
    return InvalidArgument("tier must be l1, l2 or all");
  }
  if (const auto force = parsed.find("force"); force != parsed.end()) {
    if (!force->is_boolean()) return InvalidArgument("force must be true or false");
    request.force = force->get<bool>();
  }
  LMC_ASSIGN_OR_RETURN(request.adapter, StringField(parsed, "adapter", ""));
  LMC_ASSIGN_OR_RETURN(request.selection, ParseSelection(parsed, hasher, chunk_sizes));
  return request;
}

// One tier's outcomes of a deletion, counted; `Outcome` is L1's
// store::DeleteOutcome or an adapter's tier::L2Deletion (the same three).
struct DeleteTally {
  std::uint64_t deleted = 0;
  std::uint64_t locked = 0;
  std::uint64_t not_found = 0;

  template <typename Outcome>
  static DeleteTally Of(const std::vector<Outcome>& outcomes) {
    DeleteTally tally;
    for (const Outcome outcome : outcomes) {
      if (outcome == Outcome::kDeleted) tally.deleted += 1;
      if (outcome == Outcome::kLocked) tally.locked += 1;
      if (outcome == Outcome::kNotFound) tally.not_found += 1;
    }
    return tally;
  }
  json ToJson() const {
    return {{"deleted", deleted}, {"locked", locked}, {"not_found", not_found}};
  }
};

void DeleteObjects(const httplib::Request& req, httplib::Response& res, server::Service& service,
                   tier::L2Tier* l2) {
  auto parsed =
      ParseDelete(req.body, service.state().hasher(), service.state().config().chunk_sizes);
  if (!parsed.ok()) return Error(res, 400, parsed.status().message());
  const DeleteRequest& request = *parsed;
  const KeySelection& selection = request.selection;
  // The adapters first: a request naming one that does not exist changes nothing.
  const tier::L2Cascade::View cascade = CascadeOf(l2);
  auto chosen = ChooseAdapters(cascade, request.tier == "l1" ? "" : request.adapter);
  if (!chosen.ok()) return Error(res, HttpStatusOf(chosen.status()), chosen.status().message());
  json tiers = json::object();
  std::uint64_t deleted = 0;
  std::uint64_t skipped = 0;
  if (request.tier != "l2") {
    const DeleteTally tally = DeleteTally::Of(
        service.table().Delete(L1Keys(selection, service.table()), request.force));
    deleted += tally.deleted;
    skipped += tally.locked + tally.not_found;
    tiers["l1"] = tally.ToJson();
  }
  if (request.tier != "l1") {
    const auto of_prompt = [&selection](const store::ObjectKey& key) {
      return selection.OfPrompt(key);
    };
    for (const std::size_t i : *chosen) {
      tier::L2Adapter& adapter = cascade.adapter(i);
      const std::string& name = cascade.member(i).name;
      std::vector<store::ObjectKey> keys = selection.keys;
      if (selection.by_tokens()) {
        auto listed = adapter.List(nullptr, selection.bound(), of_prompt);
        if (listed.ok()) {
          for (auto& o : *listed) keys.push_back(std::move(o.key));
        }
      }
      auto outcomes = adapter.Delete(keys, request.force);
      if (!outcomes.ok()) {
        tiers[name] = {{"error", outcomes.status().message()}};
        continue;
      }
      const DeleteTally tally = DeleteTally::Of(*outcomes);
      deleted += tally.deleted;
      skipped += tally.locked + tally.not_found;
      tiers[name] = tally.ToJson();
    }
  }
  spdlog::info("DELETE /cache/objects: {} deleted, {} skipped ({})", deleted, skipped,
               tiers.dump());
  Reply(res, 200, {{"deleted", deleted}, {"skipped", skipped}, {"ok", true}, {"tiers", tiers}});
}

}  // namespace

void AddCacheRoutes(RouteTable& routes, server::Service& service, tier::L2Tier* l2) {
  // Listing shows cached keys: admin, though it changes nothing.
  routes.Add(HttpMethod::kGet, "/cache/objects", Access::kAdminRead,
             [&service, l2](const httplib::Request& req, httplib::Response& res) {
               ListObjects(req, res, service, l2);
             });
  routes.Add(HttpMethod::kDelete, "/cache/objects", Access::kAdmin,
             [&service, l2](const httplib::Request& req, httplib::Response& res) {
               DeleteObjects(req, res, service, l2);
             });
}

}  // namespace lmcache::admin_http
