// UsedRatio: how full a bounded thing is (a pool, a tier), computed in one
// place for every figure and page that shows it (the stats' l1 usage_ratio,
// GET /status, GET /status/memory-pressure).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <optional>

namespace lmcache::stats {

// `used` over `capacity`; nullopt where the capacity is 0 (not bounded, or
// not known).
constexpr std::optional<double> UsedRatio(std::uint64_t used, std::uint64_t capacity) {
  if (capacity == 0) return std::nullopt;
  return static_cast<double>(used) / static_cast<double>(capacity);
}

}  // namespace lmcache::stats
