// UcxDescriptor: what a server tells a peer so that the peer can reach its
// UCX data channel (fleet/ucx_channel.h): its worker's address and its
// pool's size, in a flat byte form that crosses the fleet endpoint. A peer's
// descriptor is untrusted input: Parse bounds every length and refuses
// anything but the exact form.
//
// Thread-safety: a plain value and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lmcache/status.h"

namespace lmcache::fleet {

// The largest worker address a descriptor carries (UCX's are a few hundred bytes).
inline constexpr std::size_t kMaxWorkerAddressBytes = 64 * 1024;

// What a peer needs to read a pool: its worker's address (opaque to us) and
// the pool's size.
struct UcxDescriptor {
  std::string worker_address;  // ucp_worker_get_address
  std::uint64_t size = 0;      // the pool's bytes

  // A flat byte form for the handshake: magic, version, the address with its
  // length, the size. Parse bounds every length (a peer is untrusted input).
  std::string Encode() const;
  static Result<UcxDescriptor> Parse(std::string_view bytes);
};

}  // namespace lmcache::fleet
