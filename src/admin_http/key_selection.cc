#include "admin_http/key_selection.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>

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

}  // namespace

Result<std::string> StringField(const json& object, const char* name, const char* fallback) {
  const auto it = object.find(name);
  if (it == object.end()) {
    if (fallback != nullptr) return std::string(fallback);
    return InvalidArgument(std::string("missing ") + name);
  }
  if (!it->is_string()) return InvalidArgument(std::string(name) + " must be a string");
  return it->get<std::string>();
}

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

Result<KeySelection> ParseSelection(const json& parsed, worker::ChunkHasher& hasher,
                                    const store::ChunkSizes& chunk_sizes) {
  KeySelection selection;
  const bool has_keys = parsed.contains("keys");
  const bool has_tokens = parsed.contains("token_ids");
  if (has_keys == has_tokens) {
    return InvalidArgument("name the objects by keys, or by token_ids with model_name: one of them");
  }
  if (has_keys) {
    const json& keys = parsed["keys"];
    if (!keys.is_array()) return InvalidArgument("keys must be an array");
    if (keys.size() > kMaxRequestKeys) {
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
  if (tokens.size() > kMaxRequestTokens) {
    return InvalidArgument("at most " + std::to_string(kMaxRequestTokens) + " token_ids per request");
  }
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
  const auto chunk = static_cast<std::size_t>(chunk_sizes.For(selection.model));
  const std::size_t chunks = ids.size() / chunk;
  if (chunks == 0) {
    return InvalidArgument("token_ids hold no full chunk of " + std::to_string(chunk) +
                           " tokens (model " + selection.model + ")");
  }
  for (const auto& hash : hasher.Hashes(ids, chunk, chunks)) {
    selection.chunk_hashes.emplace(reinterpret_cast<const char*>(hash.data()), hash.size());
  }
  return selection;
}

// The body of a request that names objects, parsed: 400's message otherwise.
Result<json> JsonObjectBody(const std::string& body) {
  // Each key is one JSON object: a body of more objects than a request may
  // name is refused before parsing (parsed, a byte of "{}," costs far more).
  if (std::count(body.begin(), body.end(), '{') > static_cast<std::ptrdiff_t>(kMaxRequestKeys + 16)) {
    return InvalidArgument("at most " + std::to_string(kMaxRequestKeys) + " keys per request");
  }
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

}  // namespace lmcache::admin_http
