// Listing and deleting cached objects by key, with the reference's routes
// and fields (p2p-spec.md 13.2): GET /cache/objects pages through one tier
// (L1, or one L2 adapter that keeps an index: fs, mock) and DELETE
// /cache/objects deletes by key, or by a prompt's tokens and model, from
// L1, L2 or both. Keys travel in the reference's EncodedObjectKey form
// (chunk_hash_hex, model_name, kv_rank, object_group_id, cache_salt) with
// our two further fields (layout_namespace, tags), which default to the
// reference's objects' values when absent.
//
// Both routes need the admin token (route_helpers.h): a listing names
// every tenant's salt and which prompts are cached, what the rest of the
// server keeps from other local users (docs/security.md).
//
// Thread-safety: the handlers run on the HTTP server's threads and call
// internally synchronised parts (the object table, the L2 adapters).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "admin_http/http_config.h"
#include "lmcache/status.h"
#include "store/object_key.h"

namespace httplib {
class Server;
}
namespace lmcache::server {
class Service;
}
namespace lmcache::tier {
class L2Tier;
}

namespace lmcache::admin_http {

inline constexpr std::size_t kDefaultPageSize = 500;
inline constexpr std::size_t kMaxPageSize = 5000;
inline constexpr std::size_t kMaxDeleteKeys = 10000;

nlohmann::json EncodedObjectKey(const store::ObjectKey& key);
// The key `json` encodes, validated as every key is (kInvalidArgument, or
// kInvalidKey naming the field).
Result<store::ObjectKey> DecodeObjectKey(const nlohmann::json& json);
// An opaque token for "the page after `key`", and back (kInvalidArgument).
std::string PageToken(const store::ObjectKey& key);
Result<store::ObjectKey> KeyFromPageToken(const std::string& token);

// `l2` may be null (no L2 tier).
void AddCacheRoutes(httplib::Server& server, const HttpConfig& config, server::Service& service,
                    tier::L2Tier* l2);

}  // namespace lmcache::admin_http
