#include "fleet/p2p_object_key.h"

#include <algorithm>

namespace lmcache::fleet {

protocol::P2pObjectKey ToP2pObjectKey(const store::ObjectKey& key) {
  protocol::P2pObjectKey out;
  out.chunk_hash.assign(reinterpret_cast<const char*>(key.chunk_hash.data()),
                        key.chunk_hash.size());
  out.model_name = key.model_name;
  out.kv_rank = key.kv_rank;
  out.object_group_id = key.object_group_id;
  out.cache_salt = key.cache_salt;
  out.layout_namespace = key.layout_namespace;
  out.tags = key.tags;
  return out;
}

store::ObjectKey FromP2pObjectKey(const protocol::P2pObjectKey& key) {
  store::ObjectKey out;
  std::copy_n(key.chunk_hash.begin(), std::min(key.chunk_hash.size(), out.chunk_hash.size()),
              reinterpret_cast<char*>(out.chunk_hash.data()));
  out.model_name = key.model_name;
  out.kv_rank = key.kv_rank;
  out.object_group_id = static_cast<std::int32_t>(key.object_group_id);
  out.cache_salt = key.cache_salt;
  out.layout_namespace = key.layout_namespace;
  out.tags = key.tags;
  return out;
}

}  // namespace lmcache::fleet
