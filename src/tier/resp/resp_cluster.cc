#include "tier/resp/resp_cluster.h"

#include <charconv>

namespace lmcache::tier {

std::uint16_t Crc16Xmodem(std::string_view bytes) {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc ^= static_cast<std::uint16_t>(static_cast<std::uint8_t>(c) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::uint16_t KeySlot(std::string_view key) {
  const std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(Crc16Xmodem(key) % kClusterSlots);
}

std::optional<Redirection> ParseRedirection(std::string_view error) {
  Redirection r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const std::size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  unsigned slot = 0;
  const auto [end, ec] = std::from_chars(error.data(), error.data() + space, slot);
  if (ec != std::errc() || end != error.data() + space || slot >= kClusterSlots) return std::nullopt;
  r.slot = static_cast<std::uint16_t>(slot);
  r.endpoint = std::string(error.substr(space + 1));
  // "host:port" with a non-empty host and a port; Redis 7 may send ":port"
  // for "the address you used", which the caller cannot route: refuse it.
  const std::size_t colon = r.endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == r.endpoint.size()) {
    return std::nullopt;
  }
  return r;
}

Result<SlotMap> SlotMap::FromRanges(const std::vector<SlotRange>& ranges) {
  SlotMap map;
  for (const SlotRange& range : ranges) {
    if (range.first > range.last || range.last >= kClusterSlots || range.endpoint.empty()) {
      return Status(ErrorCode::kMalformedRequest,
                    "CLUSTER SLOTS named an invalid range " + std::to_string(range.first) + "-" +
                        std::to_string(range.last));
    }
    const auto node = static_cast<std::uint16_t>(map.IndexOf(range.endpoint));
    for (std::uint32_t s = range.first; s <= range.last; ++s) map.owner_[s] = node;
  }
  return map;
}

std::optional<std::size_t> SlotMap::NodeOf(std::uint16_t slot) const {
  if (slot >= kClusterSlots || owner_[slot] == kUnserved) return std::nullopt;
  return owner_[slot];
}

void SlotMap::Move(std::uint16_t slot, const std::string& endpoint) {
  if (slot < kClusterSlots) owner_[slot] = static_cast<std::uint16_t>(IndexOf(endpoint));
}

std::size_t SlotMap::IndexOf(const std::string& endpoint) {
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i] == endpoint) return i;
  }
  endpoints_.push_back(endpoint);
  return endpoints_.size() - 1;
}

std::size_t SlotMap::served_slots() const {
  std::size_t n = 0;
  for (const std::uint16_t o : owner_) n += o != kUnserved;
  return n;
}

}  // namespace lmcache::tier
