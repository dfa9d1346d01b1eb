#include "fleet/peer_info.h"

#include <optional>
#include <set>

#include "common/msgpack_cursor.h"
#include "store/object_key.h"

namespace lmcache::fleet {
namespace {

constexpr std::size_t kMaxTextBytes = 1024;
constexpr std::size_t kNoneHashBytes = 32;

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(kDigits[static_cast<unsigned char>(c) >> 4]);
    out.push_back(kDigits[static_cast<unsigned char>(c) & 15]);
  }
  return out;
}

Result<std::string> Text(msgpk::MsgpackCursor& in, std::string_view what) {
  LMC_ASSIGN_OR_RETURN(const std::string_view text, in.ReadStr(what));
  if (text.size() > kMaxTextBytes) return msgpk::Malformed(what, "is over 1 KiB");
  return std::string(text);
}

Result<store::ChunkSizes::Overrides> ReadModelChunkSizes(msgpk::MsgpackCursor& in) {
  store::ChunkSizes::Overrides sizes;
  LMC_RETURN_IF_ERROR(
      in.ReadFields("p2p.model_chunk_sizes", [&](std::string_view model) -> Result<bool> {
        if (sizes.size() >= store::kMaxModelChunkSizes) {
          return msgpk::Malformed("p2p.model_chunk_sizes", "names over 1024 models");
        }
        LMC_ASSIGN_OR_RETURN(const std::int64_t size, in.ReadInt("p2p.model_chunk_sizes"));
        if (!store::CheckModelChunkSize(std::string(model), size).ok()) {
          return msgpk::Malformed("p2p.model_chunk_sizes", "names an invalid model or chunk size");
        }
        sizes[std::string(model)] = size;
        return true;
      }));
  return sizes;
}

Result<PeerInfo> ReadPeerInfo(msgpk::MsgpackCursor& in) {
  PeerInfo info;
  std::uint32_t seen = 0;  // one bit per field below
  std::string descriptor;
  LMC_RETURN_IF_ERROR(in.ReadFields("server_info.p2p", [&](std::string_view name) -> Result<bool> {
    if (name == "boot_id") {
      LMC_ASSIGN_OR_RETURN(info.boot_id, Text(in, "p2p.boot_id"));
      seen |= 1;
    } else if (name == "chunk_size") {
      LMC_ASSIGN_OR_RETURN(info.chunk_size, in.ReadInt("p2p.chunk_size"));
      seen |= 2;
    } else if (name == "hash_algorithm") {
      LMC_ASSIGN_OR_RETURN(info.hash_algorithm, Text(in, "p2p.hash_algorithm"));
      seen |= 4;
    } else if (name == "none_hash") {
      LMC_ASSIGN_OR_RETURN(const std::string_view hash, in.ReadBytes("p2p.none_hash"));
      if (hash.size() != kNoneHashBytes) return msgpk::Malformed("p2p.none_hash", "is not 32 bytes");
      info.none_hash = std::string(hash);
      seen |= 8;
    } else if (name == "advertise_url") {
      LMC_ASSIGN_OR_RETURN(info.advertise_url, Text(in, "p2p.advertise_url"));
      seen |= 16;
    } else if (name == "key_fingerprint") {
      LMC_ASSIGN_OR_RETURN(info.key_fingerprint, Text(in, "p2p.key_fingerprint"));
      seen |= 32;
    } else if (name == "model_chunk_sizes") {
      LMC_ASSIGN_OR_RETURN(info.model_chunk_sizes, ReadModelChunkSizes(in));
    } else if (name == "data_channel") {
      LMC_ASSIGN_OR_RETURN(const std::string_view bytes, in.ReadBytes("p2p.data_channel"));
      LMC_ASSIGN_OR_RETURN(info.data_channel, UcxDescriptor::Parse(bytes));
      seen |= 64;
    } else {
      return false;  // a newer peer's field
    }
    return true;
  }));
  if (seen != 127) {
    return msgpk::Malformed("server_info.p2p",
                            "lacks a field (boot_id, chunk_size, hash_algorithm, none_hash, "
                            "advertise_url, key_fingerprint and data_channel are required)");
  }
  if (info.chunk_size <= 0) return msgpk::Malformed("p2p.chunk_size", "is not positive");
  return info;
}

}  // namespace

void PeerInfo::Encode(msgpk::Encoder& out) const {
  out.Map(model_chunk_sizes.empty() ? 7 : 8);
  out.Str("boot_id").Str(boot_id);
  out.Str("chunk_size").Int(chunk_size);
  if (!model_chunk_sizes.empty()) {
    out.Str("model_chunk_sizes").Map(static_cast<std::uint32_t>(model_chunk_sizes.size()));
    for (const auto& [model, size] : model_chunk_sizes) out.Str(model).Int(size);
  }
  out.Str("hash_algorithm").Str(hash_algorithm);
  out.Str("none_hash").Bin(none_hash);
  out.Str("advertise_url").Str(advertise_url);
  out.Str("key_fingerprint").Str(key_fingerprint);
  out.Str("data_channel").Bin(data_channel.Encode());
}

Result<PeerInfo> PeerInfo::FromServerInfo(std::string_view server_info_reply) {
  msgpk::MsgpackCursor in(server_info_reply);
  std::optional<PeerInfo> info;
  LMC_RETURN_IF_ERROR(in.ReadFields("server_info", [&](std::string_view name) -> Result<bool> {
    if (name != kPeerInfoField) return false;
    LMC_ASSIGN_OR_RETURN(info, ReadPeerInfo(in));
    return true;
  }));
  if (!in.AtEnd()) return msgpk::Malformed("server_info", "is followed by more bytes");
  if (!info) {
    return Status(ErrorCode::kNotSupported,
                  "the peer's server_info has no p2p section (P2P off there, or not a fleet "
                  "member's connection)");
  }
  return *std::move(info);
}

Status CheckCompatible(const PeerInfo& ours, const PeerInfo& peer) {
  auto differs = [](std::string_view field, const std::string& mine, const std::string& theirs) {
    return Status(ErrorCode::kLayoutMismatch, "its " + std::string(field) + " is " + theirs +
                                                  ", ours is " + mine +
                                                  ": no key of one can match the other's");
  };
  if (const ChunkAgreement chunks{ours.chunk_sizes(), peer.chunk_sizes()}; !chunks.AgreesOnAny()) {
    return differs("chunk size", chunks.ours.Describe() + " tokens",
                   chunks.theirs.Describe() + " tokens");
  }
  if (peer.hash_algorithm != ours.hash_algorithm) {
    return differs("hash algorithm", ours.hash_algorithm, peer.hash_algorithm);
  }
  if (peer.none_hash != ours.none_hash) {
    return differs("NONE_HASH", Hex(ours.none_hash), Hex(peer.none_hash));
  }
  if (peer.key_fingerprint != ours.key_fingerprint) {
    return differs("fleet key fingerprint", ours.key_fingerprint, peer.key_fingerprint);
  }
  return Status::Ok();
}

bool ChunkAgreement::AgreesOnAny() const {
  if (ours.default_size() == theirs.default_size()) return true;
  for (const auto* named : {&ours.overrides(), &theirs.overrides()}) {
    for (const auto& [model, size] : *named) {
      if (Agrees(model)) return true;
    }
  }
  return false;
}

std::string ChunkAgreement::Differences() const {
  std::string out;
  auto add = [&](std::string_view what, std::int64_t mine, std::int64_t peers) {
    if (!out.empty()) out += "; ";
    out += std::string(what) + ": " + std::to_string(mine) + " here, " + std::to_string(peers) +
           " there";
  };
  std::set<std::string, std::less<>> named;
  for (const auto& [model, size] : ours.overrides()) named.insert(model);
  for (const auto& [model, size] : theirs.overrides()) named.insert(model);
  for (const std::string& model : named) {
    if (!Agrees(model)) add(model, ours.For(model), theirs.For(model));
  }
  if (ours.default_size() != theirs.default_size()) {
    add("every other model", ours.default_size(), theirs.default_size());
  }
  return out;
}

std::string PeerHello::Encode() const {
  msgpk::Encoder out;
  out.Map(2);
  out.Str("advertise_url").Str(advertise_url);
  out.Str("boot_id").Str(boot_id);
  return out.Take();
}

Result<PeerHello> PeerHello::Decode(std::string_view frame) {
  msgpk::MsgpackCursor in(frame);
  PeerHello hello;
  LMC_RETURN_IF_ERROR(in.ReadFields("p2p_hello", [&](std::string_view name) -> Result<bool> {
    if (name == "advertise_url") {
      LMC_ASSIGN_OR_RETURN(hello.advertise_url, Text(in, "p2p_hello.advertise_url"));
    } else if (name == "boot_id") {
      LMC_ASSIGN_OR_RETURN(hello.boot_id, Text(in, "p2p_hello.boot_id"));
    } else {
      return false;  // a newer member's field
    }
    return true;
  }));
  if (!in.AtEnd()) return msgpk::Malformed("p2p_hello", "is followed by more bytes");
  if (hello.advertise_url.empty() || hello.boot_id.empty()) {
    return msgpk::Malformed("p2p_hello", "needs a non-empty advertise_url and boot_id");
  }
  return hello;
}

}  // namespace lmcache::fleet
