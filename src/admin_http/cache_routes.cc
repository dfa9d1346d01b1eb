#include "admin_http/cache_routes.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <unordered_set>

#include "admin_http/route_helpers.h"
#include "server/service.h"
#include "tier/l2_tier.h"

namespace lmcache::admin_http {
namespace {

using nlohmann::json;

constexpr char kHexDigits[] = "0123456789abcdef";

std::string Hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kHexDigits[b >> 4];
    out += kHexDigits[b & 15];
  }
  return out;
}

Result<std::string> Unhex(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidArgument("odd number of hex digits");
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    unsigned value = 0;
    const auto [end, error] = std::from_chars(hex.data() + 2 * i, hex.data() + 2 * i + 2, value, 16);
    if (error != std::errc() || end != hex.data() + 2 * i + 2) {
      return InvalidArgument("not a hex digit");
    }
    out[i] = static_cast<char>(value);
  }
  return out;
}

// A JSON integer field of `json`, or `fallback` when absent.
Result<std::int64_t> IntField(const json& object, const char* name, std::int64_t fallback) {
  const auto it = object.find(name);
  if (it == object.end()) return fallback;
  if (!it->is_number_integer()) return InvalidArgument(std::string(name) + " must be an integer");
  return it->get<std::int64_t>();
}

Result<std::string> StringField(const json& object, const char* name, const char* fallback) {
  const auto it = object.find(name);
  if (it == object.end()) {
    if (fallback != nullptr) return std::string(fallback);
    return InvalidArgument(std::string("missing ") + name);
  }
  if (!it->is_string()) return InvalidArgument(std::string(name) + " must be a string");
  return it->get<std::string>();
}

// What a request names: "l1", or one L2 adapter ("fs#1", its position "1",
// or, empty, the first that can list).
struct TierChoice {
  bool l1 = false;
  std::vector<std::size_t> adapters;  // positions, 0-based
};

std::string AdapterName(tier::L2Tier& l2, std::size_t i) {
  return l2.adapter(i).Stats().type + "#" + std::to_string(i + 1);
}

Result<std::vector<std::size_t>> ChooseAdapters(tier::L2Tier* l2, const std::string& name) {
  std::vector<std::size_t> chosen;
  if (l2 == nullptr) return chosen;
  for (std::size_t i = 0; i < l2->adapter_count(); ++i) {
    if (name.empty() || name == AdapterName(*l2, i) || name == std::to_string(i + 1)) {
      chosen.push_back(i);
    }
  }
  if (!name.empty() && chosen.empty()) {
    return Status(ErrorCode::kNotFound, "no L2 adapter '" + name +
                                            "': name one as GET /config/adapters does (fs#1) or "
                                            "by its position (1)");
  }
  return chosen;
}

int HttpStatusOf(const Status& status) {
  switch (status.code()) {
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kNotSupported: return 501;
    default: return 400;
  }
}

json PinFigures(const store::ObjectTable& table) {
  const store::TableStats stats = table.Stats();
  return {{"pinned_objects", stats.pinned_objects},
          {"pinned_bytes", stats.pinned_bytes},
          {"limit_bytes", table.pinned_limit_bytes()}};
}

// A listing's page_size and page_token.
struct PageRequest {
  std::size_t size = kDefaultPageSize;
  std::optional<store::ObjectKey> after;
  const store::ObjectKey* after_key() const { return after ? &*after : nullptr; }
};

Result<PageRequest> ParsePage(const httplib::Request& req) {
  PageRequest page;
  if (req.has_param("page_size")) {
    const std::string text = req.get_param_value("page_size");
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), page.size);
    if (error != std::errc() || end != text.data() + text.size() || page.size < 1 ||
        page.size > kMaxPageSize) {
      return InvalidArgument("page_size must be an integer in [1, 5000]");
    }
  }
  if (req.has_param("page_token") && !req.get_param_value("page_token").empty()) {
    auto key = KeyFromPageToken(req.get_param_value("page_token"));
    if (!key.ok()) return InvalidArgument("bad page_token: " + key.status().message());
    page.after = std::move(key).value();
  }
  return page;
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
  const std::string salt = req.get_param_value("cache_salt");
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
    auto chosen = ChooseAdapters(l2, req.get_param_value("adapter"));
    if (!chosen.ok()) return Error(res, HttpStatusOf(chosen.status()), chosen.status().message());
    std::optional<Status> refusal;
    bool listed = false;
    for (const std::size_t i : *chosen) {
      auto page = l2->adapter(i).List(after ? &*after : nullptr, page_size + 1, keep);
      if (!page.ok()) {
        refusal = Status(page.status().code(), AdapterName(*l2, i) + ": " + page.status().message());
        continue;
      }
      adapter = AdapterName(*l2, i);
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

// The objects a request names: its `keys`, or every object of the prompt's
// full chunks (any rank, layout and tags) of `model_name` and `cache_salt`.
struct KeySelection {
  std::vector<store::ObjectKey> keys;
  std::unordered_set<std::string> chunk_hashes;  // by tokens: the chunks' hashes, raw
  std::string model;
  std::string salt;
  bool by_tokens() const { return !chunk_hashes.empty(); }
  bool OfPrompt(const store::ObjectKey& key) const {
    return key.model_name == model && key.cache_salt == salt &&
           chunk_hashes.contains(std::string(reinterpret_cast<const char*>(key.chunk_hash.data()),
                                             key.chunk_hash.size()));
  }
  // At most this many objects of one prompt per tier (every rank, layout
  // and tag set of each chunk), so a request costs what its size allows.
  std::size_t bound() const { return chunk_hashes.size() * 4096; }
};

Result<KeySelection> ParseSelection(const json& parsed, worker::ChunkHasher& hasher) {
  KeySelection selection;
  const bool has_keys = parsed.contains("keys");
  const bool has_tokens = parsed.contains("token_ids");
  if (has_keys == has_tokens) {
    return InvalidArgument("name the objects by keys, or by token_ids with model_name: one of them");
  }
  if (has_keys) {
    const json& keys = parsed["keys"];
    if (!keys.is_array()) return InvalidArgument("keys must be an array");
    if (keys.size() > kMaxDeleteKeys) {
      return InvalidArgument("at most 10000 keys per request, got " + std::to_string(keys.size()));
    }
    for (const json& key : keys) {
      auto decoded = DecodeObjectKey(key);
      if (!decoded.ok()) return decoded.status();
      selection.keys.push_back(std::move(decoded).value());
    }
    return selection;
  }
  const json& tokens = parsed["token_ids"];
  if (!tokens.is_array()) return InvalidArgument("token_ids must be an array of integers");
  std::vector<std::uint32_t> ids;
  ids.reserve(tokens.size());
  for (const json& t : tokens) {
    if (!t.is_number_unsigned() || t.get<std::uint64_t>() > UINT32_MAX) {
      return InvalidArgument("token_ids must be integers in [0, 2^32)");
    }
    ids.push_back(t.get<std::uint32_t>());
  }
  LMC_ASSIGN_OR_RETURN(selection.model, StringField(parsed, "model_name", nullptr));
  LMC_RETURN_IF_ERROR(store::ValidateModelName(selection.model));
  LMC_ASSIGN_OR_RETURN(selection.salt, StringField(parsed, "cache_salt", ""));
  LMC_RETURN_IF_ERROR(store::ValidateCacheSalt(selection.salt));
  const std::size_t chunks = ids.size() / hasher.chunk_size();
  if (chunks == 0) {
    return InvalidArgument("token_ids hold no full chunk of " +
                           std::to_string(hasher.chunk_size()) + " tokens");
  }
  for (const auto& hash : hasher.Hashes(ids, chunks)) {
    selection.chunk_hashes.emplace(reinterpret_cast<const char*>(hash.data()), hash.size());
  }
  return selection;
}

// The body of a request that names objects, parsed: 400's message otherwise.
Result<json> JsonObjectBody(const std::string& body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return InvalidArgument("expected a JSON object with keys, or token_ids and model_name");
  }
  return parsed;
}

// The L1 objects `selection` names: its keys, and the prompt's resident objects.
std::vector<store::ObjectKey> L1Keys(const KeySelection& selection, store::ObjectTable& table) {
  std::vector<store::ObjectKey> keys = selection.keys;
  if (selection.by_tokens()) {
    const auto of_prompt = [&selection](const store::ObjectKey& key) {
      return selection.OfPrompt(key);
    };
    for (auto& o : table.ListResident(nullptr, selection.bound(), of_prompt)) {
      keys.push_back(std::move(o.key));
    }
  }
  return keys;
}

struct DeleteRequest {
  KeySelection selection;
  std::string tier = "l2";
  bool force = false;
  std::string adapter;
};

Result<DeleteRequest> ParseDelete(const std::string& body, worker::ChunkHasher& hasher) {
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
  LMC_ASSIGN_OR_RETURN(request.selection, ParseSelection(parsed, hasher));
  return request;
}

struct DeleteTally {
  std::uint64_t deleted = 0;
  std::uint64_t locked = 0;
  std::uint64_t not_found = 0;
  json ToJson() const {
    return {{"deleted", deleted}, {"locked", locked}, {"not_found", not_found}};
  }
};

void DeleteObjects(const httplib::Request& req, httplib::Response& res, server::Service& service,
                   tier::L2Tier* l2) {
  auto parsed = ParseDelete(req.body, service.state().hasher());
  if (!parsed.ok()) return Error(res, 400, parsed.status().message());
  const DeleteRequest& request = *parsed;
  const KeySelection& selection = request.selection;
  json tiers = json::object();
  std::uint64_t deleted = 0;
  std::uint64_t skipped = 0;
  if (request.tier != "l2") {
    DeleteTally tally;
    for (const store::DeleteOutcome outcome :
         service.table().Delete(L1Keys(selection, service.table()), request.force)) {
      if (outcome == store::DeleteOutcome::kDeleted) tally.deleted += 1;
      if (outcome == store::DeleteOutcome::kLocked) tally.locked += 1;
      if (outcome == store::DeleteOutcome::kNotFound) tally.not_found += 1;
    }
    deleted += tally.deleted;
    skipped += tally.locked + tally.not_found;
    tiers["l1"] = tally.ToJson();
  }
  if (request.tier != "l1") {
    auto chosen = ChooseAdapters(l2, request.adapter);
    if (!chosen.ok()) return Error(res, HttpStatusOf(chosen.status()), chosen.status().message());
    const auto of_prompt = [&selection](const store::ObjectKey& key) {
      return selection.OfPrompt(key);
    };
    for (const std::size_t i : *chosen) {
      tier::L2Adapter& adapter = l2->adapter(i);
      std::vector<store::ObjectKey> keys = selection.keys;
      if (selection.by_tokens()) {
        auto listed = adapter.List(nullptr, selection.bound(), of_prompt);
        if (listed.ok()) {
          for (auto& o : *listed) keys.push_back(std::move(o.key));
        }
      }
      auto outcomes = adapter.Delete(keys, request.force);
      if (!outcomes.ok()) {
        tiers[AdapterName(*l2, i)] = {{"error", outcomes.status().message()}};
        continue;
      }
      DeleteTally tally;
      for (const tier::L2Deletion outcome : *outcomes) {
        if (outcome == tier::L2Deletion::kDeleted) tally.deleted += 1;
        if (outcome == tier::L2Deletion::kLocked) tally.locked += 1;
        if (outcome == tier::L2Deletion::kNotFound) tally.not_found += 1;
      }
      deleted += tally.deleted;
      skipped += tally.locked + tally.not_found;
      tiers[AdapterName(*l2, i)] = tally.ToJson();
    }
  }
  spdlog::info("DELETE /cache/objects: {} deleted, {} skipped ({})", deleted, skipped,
               tiers.dump());
  Reply(res, 200, {{"deleted", deleted}, {"skipped", skipped}, {"ok", true}, {"tiers", tiers}});
}

void PinObjects(const httplib::Request& req, httplib::Response& res, server::Service& service) {
  auto body = JsonObjectBody(req.body);
  if (!body.ok()) return Error(res, 400, body.status().message());
  auto selection = ParseSelection(*body, service.state().hasher());
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
  auto selection = ParseSelection(*body, service.state().hasher());
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

json EncodedObjectKey(const store::ObjectKey& key) {
  return {{"chunk_hash_hex",
           Hex(std::string_view(reinterpret_cast<const char*>(key.chunk_hash.data()),
                                key.chunk_hash.size()))},
          {"model_name", key.model_name},
          {"kv_rank", key.kv_rank},
          {"object_group_id", key.object_group_id},
          {"cache_salt", key.cache_salt},
          {"layout_namespace", key.layout_namespace},
          {"tags", key.tags}};
}

Result<store::ObjectKey> DecodeObjectKey(const json& object) {
  if (!object.is_object()) return InvalidArgument("a key must be a JSON object");
  store::ObjectKey key;
  LMC_ASSIGN_OR_RETURN(const std::string hex, StringField(object, "chunk_hash_hex", nullptr));
  if (hex.size() != 2 * key.chunk_hash.size()) {
    return InvalidArgument("chunk_hash_hex must be 64 hex digits");
  }
  LMC_ASSIGN_OR_RETURN(const std::string raw, Unhex(hex));
  std::copy(raw.begin(), raw.end(), reinterpret_cast<char*>(key.chunk_hash.data()));
  LMC_ASSIGN_OR_RETURN(key.model_name, StringField(object, "model_name", nullptr));
  LMC_ASSIGN_OR_RETURN(key.kv_rank, IntField(object, "kv_rank", -1));
  if (key.kv_rank < 0) return InvalidArgument("kv_rank must be an integer >= 0");
  LMC_ASSIGN_OR_RETURN(const std::int64_t group, IntField(object, "object_group_id", 0));
  if (group < 0 || group > INT32_MAX) return InvalidArgument("object_group_id is out of range");
  key.object_group_id = static_cast<std::int32_t>(group);
  LMC_ASSIGN_OR_RETURN(key.cache_salt, StringField(object, "cache_salt", ""));
  LMC_ASSIGN_OR_RETURN(const std::int64_t layout, IntField(object, "layout_namespace", 0));
  if (layout < 0 || layout > UINT32_MAX) return InvalidArgument("layout_namespace is out of range");
  key.layout_namespace = static_cast<std::uint32_t>(layout);
  LMC_ASSIGN_OR_RETURN(key.tags, StringField(object, "tags", ""));
  LMC_RETURN_IF_ERROR(store::ValidateObjectKey(key));
  return key;
}

std::string PageToken(const store::ObjectKey& key) { return Hex(EncodedObjectKey(key).dump()); }

Result<store::ObjectKey> KeyFromPageToken(const std::string& token) {
  // A key is at most a few KiB: a longer token is not one of ours.
  if (token.size() > 16384) return InvalidArgument("too long");
  LMC_ASSIGN_OR_RETURN(const std::string text, Unhex(token));
  const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return InvalidArgument("not a token this server gave");
  return DecodeObjectKey(parsed);
}

void AddCacheRoutes(httplib::Server& s, const HttpConfig& config, server::Service& service,
                    tier::L2Tier* l2) {
  s.Get("/cache/objects", [&config, &service, l2](const httplib::Request& req,
                                                   httplib::Response& res) {
    if (RefuseAdmin(config, req, res, /*changes_state=*/false)) return;
    ListObjects(req, res, service, l2);
  });
  s.Delete("/cache/objects", [&config, &service, l2](const httplib::Request& req,
                                                      httplib::Response& res) {
    if (RefuseAdmin(config, req, res)) return;
    DeleteObjects(req, res, service, l2);
  });
  s.Get("/cache/pins", [&config, &service](const httplib::Request& req, httplib::Response& res) {
    if (RefuseAdmin(config, req, res, /*changes_state=*/false)) return;
    ListPins(req, res, service);
  });
  s.Post("/cache/pins", [&config, &service](const httplib::Request& req, httplib::Response& res) {
    if (RefuseAdmin(config, req, res)) return;
    PinObjects(req, res, service);
  });
  s.Delete("/cache/pins", [&config, &service](const httplib::Request& req, httplib::Response& res) {
    if (RefuseAdmin(config, req, res)) return;
    UnpinObjects(req, res, service);
  });
}

}  // namespace lmcache::admin_http
