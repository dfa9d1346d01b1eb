// Test helpers that build object keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/object_key.h"

namespace lmcache::testing {

// A key whose chunk hash encodes `n`.
inline store::ObjectKey KeyN(std::uint64_t n, std::string model = "m", std::int64_t rank = 0) {
  store::ObjectKey key;
  for (int i = 0; i < 8; ++i) key.chunk_hash[i] = static_cast<std::uint8_t>(n >> (8 * i));
  key.chunk_hash[31] = 0x5a;
  key.model_name = std::move(model);
  key.kv_rank = rank;
  return key;
}

// Keys [first, first + count) in chunk order.
inline std::vector<store::ObjectKey> KeysN(std::uint64_t first, std::size_t count) {
  std::vector<store::ObjectKey> keys;
  for (std::size_t i = 0; i < count; ++i) keys.push_back(KeyN(first + i));
  return keys;
}

}  // namespace lmcache::testing
