// GET /status/memory-pressure: how close each local tier is to its capacity,
// in the shape of the reference's InstanceMemoryPressureReport (LMCache
// lmcache/v1/multiprocess/memory_pressure.py, served by http_apis/info_api.py),
// so a coordinator or dashboard written against the reference reads ours.
//
// Levels, as the reference classifies them: "critical" once a tier is full,
// "high" from its eviction trigger watermark, "normal" below, "unknown" where
// usage or capacity is not known (a RESP tier, which Redis bounds on its own).
// The overall level is the highest known one; `complete` is false when any
// tier is unknown.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/server_status.h"

namespace lmcache::admin_http {

enum class PressureLevel : std::uint8_t { kUnknown, kNormal, kHigh, kCritical };

std::string_view PressureLevelName(PressureLevel level);

// `capacity_bytes` nullopt or 0: not bounded, or not known.
PressureLevel ClassifyPressure(std::optional<std::uint64_t> used_bytes,
                               std::optional<std::uint64_t> capacity_bytes,
                               std::optional<double> trigger_watermark);

// The report: {instance_id, timestamp_ms, overall_level, complete, tiers: [L1,
// then each L2 adapter in --l2-adapter order]}.
nlohmann::json MemoryPressureJson(const server::ServerStatus& status, std::int64_t timestamp_ms);

}  // namespace lmcache::admin_http
