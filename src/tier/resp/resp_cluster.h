// RespCluster: the pure parts of speaking to a Redis Cluster: the hash slot
// of a key (CRC16/XMODEM of the key, or of its first non-empty {hash tag},
// modulo 16384), the MOVED/ASK redirections a node answers with, and the
// slot map (which node serves which slot) built from CLUSTER SLOTS.
//
// Endpoints are "host:port" strings as the cluster itself names its nodes,
// so a redirection to a node not seen before adds it without translation.
//
// Thread-safety: pure functions; a SlotMap is a plain value.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"

namespace lmcache::tier {

inline constexpr std::uint16_t kClusterSlots = 16384;

std::uint16_t Crc16Xmodem(std::string_view bytes);
// The slot Redis Cluster assigns `key` (hash tags as Redis does: the part
// between the first '{' and the next '}', when it is not empty).
std::uint16_t KeySlot(std::string_view key);

struct Redirection {
  bool ask = false;  // ASK: this command only, after ASKING; MOVED: the slot moved
  std::uint16_t slot = 0;
  std::string endpoint;  // "host:port"
};
// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381"; nullopt for any other error.
std::optional<Redirection> ParseRedirection(std::string_view error);

// One contiguous slot range served by one master, as CLUSTER SLOTS lists it.
struct SlotRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  std::string endpoint;
};

class SlotMap {
 public:
  // Fails when a range is out of bounds. Slots no range names stay unserved.
  static Result<SlotMap> FromRanges(const std::vector<SlotRange>& ranges);

  // The index into endpoints() of the node serving `slot`; nullopt if none.
  std::optional<std::size_t> NodeOf(std::uint16_t slot) const;
  // A MOVED redirection: `slot` is served by `endpoint` from now on.
  void Move(std::uint16_t slot, const std::string& endpoint);
  // Adds `endpoint` if it is new; its index either way.
  std::size_t IndexOf(const std::string& endpoint);

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  std::size_t served_slots() const;

 private:
  static constexpr std::uint16_t kUnserved = 0xffff;
  std::vector<std::string> endpoints_;
  std::vector<std::uint16_t> owner_ = std::vector<std::uint16_t>(kClusterSlots, kUnserved);
};

}  // namespace lmcache::tier
