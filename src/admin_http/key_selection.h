// What the cache and pin routes share: keys in the reference's
// EncodedObjectKey form (chunk_hash_hex, model_name, kv_rank,
// object_group_id, cache_salt) with our two further fields
// (layout_namespace, tags, which default to the reference's objects' values
// when absent), page tokens, and the objects a request body names: its
// `keys`, or a prompt's `token_ids` with `model_name` (and `cache_salt`),
// hashed as a lookup hashes them.
//
// Thread-safety: stateless functions; call them from any handler thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmcache/status.h"
#include "store/chunk_sizes.h"
#include "store/object_key.h"
#include "store/object_table.h"
#include "worker/chunk_hasher.h"

namespace httplib {
struct Request;
}

namespace lmcache::admin_http {

inline constexpr std::size_t kDefaultPageSize = 500;
inline constexpr std::size_t kMaxPageSize = 5000;
inline constexpr std::size_t kMaxRequestKeys = 10000;
inline constexpr std::size_t kMaxRequestTokens = 1 << 20;

nlohmann::json EncodedObjectKey(const store::ObjectKey& key);
// The key `json` encodes, validated as every key is (kInvalidArgument, or
// kInvalidKey naming the field).
Result<store::ObjectKey> DecodeObjectKey(const nlohmann::json& json);
// An opaque token for "the page after `key`", and back (kInvalidArgument).
std::string PageToken(const store::ObjectKey& key);
Result<store::ObjectKey> KeyFromPageToken(const std::string& token);

// A listing's page_size (1..5000, default 500) and page_token.
struct PageRequest {
  std::size_t size = kDefaultPageSize;
  std::optional<store::ObjectKey> after;
  const store::ObjectKey* after_key() const { return after ? &*after : nullptr; }
};
Result<PageRequest> ParsePage(const httplib::Request& req);

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

// The selection `parsed` names (kInvalidArgument: 400's message).
Result<KeySelection> ParseSelection(const nlohmann::json& parsed, worker::ChunkHasher& hasher,
                                    const store::ChunkSizes& chunk_sizes);
// A request body that must be a JSON object.
Result<nlohmann::json> JsonObjectBody(const std::string& body);
// The L1 objects `selection` names: its keys, and the prompt's resident objects.
std::vector<store::ObjectKey> L1Keys(const KeySelection& selection, store::ObjectTable& table);
// A JSON string field of `object`: `fallback` when absent (null: required).
Result<std::string> StringField(const nlohmann::json& object, const char* name,
                                const char* fallback);

}  // namespace lmcache::admin_http
