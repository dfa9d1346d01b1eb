// The takeover protocol's messages and their byte form: what a successor
// server and its predecessor say over the private takeover socket
// (takeover_socket.h; docs/architecture.md, "Restarts and upgrades").
//
//   successor -> predecessor  kHello    version, pool geometry, cold fallback allowed
//   predecessor -> successor  kVerdict  handover | cold | refused, with the reason
//   predecessor -> successor  kImage    (+ the segment's fd) pool image, registrations
//   successor -> predecessor  kAdopted  (empty) the successor owns the pool now
//
// Fixed-width integers in the host's byte order (both ends run on one host:
// they share a shared-memory segment), strings as u32 length + bytes, lists
// as u64 count + items. Decoders treat their input as untrusted (a stray
// process of the same user may connect): every length is checked against the
// bytes left, every failure is kMalformedRequest naming the field, and no
// input makes them allocate more than a small multiple of its own size.
//
// Thread-safety: stateless functions over plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lmcache/status.h"
#include "store/chunk_sizes.h"
#include "store/pool_image.h"
#include "worker/instances.h"

namespace lmcache::restart {

inline constexpr std::uint32_t kHandoverVersion = 1;

enum class FrameType : std::uint8_t { kHello = 1, kVerdict = 2, kImage = 3, kAdopted = 4 };

// What must match for objects to be adopted in place: the same segment, the
// same layout of its bytes (slabs are adopted at their pages), the same chunk
// size of every model (keys name chunks of it).
struct TakeoverGeometry {
  std::string shm_name;
  store::PoolGeometry pool;
  store::ChunkSizes chunk_sizes;
  bool operator==(const TakeoverGeometry&) const = default;
};
// "" when `successor` can adopt a pool of `ours`, else what differs, with
// both values ("the pool size in bytes (--l1-size-gb): 4294967296 here,
// 8589934592 in the successor").
std::string GeometryMismatch(const TakeoverGeometry& ours, const TakeoverGeometry& successor);

struct TakeoverHello {
  std::uint32_t version = kHandoverVersion;
  TakeoverGeometry geometry;
  // --takeover=if-compatible: on a mismatch the predecessor steps down and
  // removes its pool, and the successor starts cold.
  bool cold_if_incompatible = false;
};

enum class Verdict : std::uint8_t { kHandover = 1, kCold = 2, kRefused = 3 };
struct TakeoverVerdict {
  Verdict verdict = Verdict::kRefused;
  std::string message;
};

struct HandoverImage {
  std::string boot_id;   // the predecessor's, for the successor's log
  std::string shm_name;  // the pool's (a successor without --shm-name takes it)
  store::PoolImage pool;
  std::vector<worker::CarriedRegistration> registrations;
};

std::string EncodeHello(const TakeoverHello& hello);
Result<TakeoverHello> DecodeHello(std::string_view bytes);
std::string EncodeVerdict(const TakeoverVerdict& verdict);
Result<TakeoverVerdict> DecodeVerdict(std::string_view bytes);
std::string EncodeImage(const HandoverImage& image);
Result<HandoverImage> DecodeImage(std::string_view bytes);

}  // namespace lmcache::restart
