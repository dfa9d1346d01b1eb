// PeerInfo: what one server tells a fleet member about itself, the content
// of the P2P handshake (issue 42, section 4). A member asks with server_info
// over the fleet endpoint (so only a holder of the fleet key ever sees it);
// the reply then carries a "p2p" map with these fields beside the ones every
// client gets. The requester checks it against its own (CheckCompatible)
// before it asks that peer for anything: a peer that cuts chunks of another
// size or hashes them otherwise would never match a key, and the reference
// lets such peers run and silently miss; we exclude them, saying why.
//
// A peer's reply is untrusted input: Parse bounds every string, requires
// every field, and refuses a descriptor that is not exactly one.
//
// Thread-safety: a plain value and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/msgpack_codec.h"
#include "fleet/ucx_descriptor.h"
#include "lmcache/status.h"
#include "store/chunk_sizes.h"

namespace lmcache::fleet {

// The name server_info's reply gives the handshake's map.
inline constexpr std::string_view kPeerInfoField = "p2p";

struct PeerInfo {
  std::string boot_id;         // a new one: the peer restarted (forget its old life)
  std::int64_t chunk_size = 0;  // tokens per chunk (--chunk-size)
  // Models cut otherwise (--model-chunk-size); sent only when there are any.
  store::ChunkSizes::Overrides model_chunk_sizes;
  std::string hash_algorithm;  // "blake3": how a chunk's key is computed from its tokens
  std::string none_hash;       // the 32-byte seed of the rolling hash
  std::string advertise_url;   // where members reach its fleet endpoint
  std::string key_fingerprint;  // the fleet key's (fleet::FleetKey::fingerprint)
  UcxDescriptor data_channel;  // how to reach its UCX data channel

  // Writes the map (the value of server_info's "p2p" field).
  void Encode(msgpk::Encoder& out) const;
  // Reads the "p2p" map out of a whole server_info reply.
  static Result<PeerInfo> FromServerInfo(std::string_view server_info_reply);
  store::ChunkSizes chunk_sizes() const { return store::ChunkSizes(chunk_size, model_chunk_sizes); }
};

// Which models' prompts two servers cut into the same chunks: only those
// models' keys can match, so only those are asked of the peer.
struct ChunkAgreement {
  store::ChunkSizes ours;
  store::ChunkSizes theirs;

  bool Agrees(std::string_view model) const { return ours.For(model) == theirs.For(model); }
  // Some model agrees: the default sizes, or a model either side names.
  bool AgreesOnAny() const;
  // "" when every model agrees; else each that differs, with both sizes
  // ("model-b: 640 here, 256 there; every other model: 256 here, 512 there").
  std::string Differences() const;
};

// PeerHello: which requester a connection to a fleet endpoint speaks for,
// the one frame of p2p_hello (our operation, by name). A member sends it
// before each handshake, so its owners know its connections as one
// requester in one life: an unlock on a connection ZMQ remade after a break
// ends what a lookup on the old one locked, and a new life (a new boot id at
// the same URL) ends the old one's tasks (server/p2p_ops.h).
struct PeerHello {
  std::string advertise_url;  // the requester's own fleet endpoint, as its handshake says
  std::string boot_id;        // of the requester's current life

  std::string Encode() const;
  // Untrusted: both fields required, non-empty and at most 1 KiB.
  static Result<PeerHello> Decode(std::string_view frame);
};

// Ok when `peer`'s chunks can be `ours`: the same chunk size for some model
// (ChunkAgreement::AgreesOnAny), hash algorithm, NONE_HASH and fleet key. Otherwise kLayoutMismatch
// naming the first field that differs and both values, for the one log line and /status.
Status CheckCompatible(const PeerInfo& ours, const PeerInfo& peer);

}  // namespace lmcache::fleet
