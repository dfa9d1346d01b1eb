#include "fleet/ucx_wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>
#include <string_view>

namespace lmcache::fleet {
namespace {

// A PRF of the data key under a label of its own: keys for distinct uses.
Blake3Digest Derive(const FleetDataKey& data_key, std::string_view label) {
  Blake3Digest key;
  std::memcpy(key.data(), data_key.data(), key.size());
  Blake3Hasher hasher(key);
  hasher.Update(label.data(), label.size());
  OPENSSL_cleanse(key.data(), key.size());
  return hasher.Finalize();
}

Blake3Digest ReplyMac(const DataChannelKeys& keys, const ReadReply& reply) {
  Blake3Hasher hasher(keys.reply);
  // Every field before the MAC, as laid out on the wire (no padding).
  static_assert(offsetof(ReadReply, mac) == 16 + 8 + 4 + 4 + 32);
  hasher.Update(&reply, offsetof(ReadReply, mac));
  return hasher.Finalize();
}

Blake3Digest BytesDigest(const DataChannelKeys& keys, const ReadId& id,
                         std::span<const std::byte> bytes) {
  Blake3Hasher hasher(keys.bytes);
  hasher.Update(id.data(), id.size());
  hasher.Update(bytes.data(), bytes.size());
  return hasher.Finalize();
}

void RequestMac(const DataChannelKeys& keys, const ReadRequest& request, std::uint8_t* out) {
  static_assert(offsetof(ReadRequest, mac) == 16 + 8 + 8 + 8 + 4 + 4);
  std::uint8_t digest[32];
  unsigned int length = 0;
  HMAC(EVP_sha256(), keys.request.data(), static_cast<int>(keys.request.size()),
       reinterpret_cast<const std::uint8_t*>(&request), offsetof(ReadRequest, mac), digest,
       &length);
  std::memcpy(out, digest, kMacBytes);
}

}  // namespace

DataChannelKeys DataChannelKeys::From(const FleetDataKey& data_key) {
  DataChannelKeys keys;
  keys.request = data_key;
  keys.reply = Derive(data_key, "lmcache data channel: reply MAC v1");
  keys.bytes = Derive(data_key, "lmcache data channel: reply bytes v1");
  return keys;
}

void DataChannelKeys::Wipe() {
  OPENSSL_cleanse(request.data(), request.size());
  OPENSSL_cleanse(reply.data(), reply.size());
  OPENSSL_cleanse(bytes.data(), bytes.size());
}

ReadId NewReadId() {
  ReadId id;
  // RAND_bytes fails only when the CSPRNG cannot be seeded: nothing can be
  // authenticated then, and continuing with guessable ids is worse.
  if (RAND_bytes(id.data(), static_cast<int>(id.size())) != 1) {
    throw std::runtime_error("RAND_bytes failed: the system's CSPRNG is unavailable");
  }
  return id;
}

void SignRequest(const DataChannelKeys& keys, ReadRequest* request) {
  RequestMac(keys, *request, request->mac);
}

bool RequestSigned(const DataChannelKeys& keys, const ReadRequest& request) {
  std::uint8_t mac[kMacBytes];
  RequestMac(keys, request, mac);
  return CRYPTO_memcmp(mac, request.mac, kMacBytes) == 0;
}

void SignReply(const DataChannelKeys& keys, std::span<const std::byte> bytes, ReadReply* reply) {
  if (reply->flags & kHasDigest) reply->digest = BytesDigest(keys, reply->id, bytes);
  const Blake3Digest mac = ReplyMac(keys, *reply);
  std::memcpy(reply->mac, mac.data(), kMacBytes);
}

bool ReplySigned(const DataChannelKeys& keys, const ReadReply& reply) {
  const Blake3Digest mac = ReplyMac(keys, reply);
  return CRYPTO_memcmp(mac.data(), reply.mac, kMacBytes) == 0;
}

bool ReplyBytesMatch(const DataChannelKeys& keys, const ReadReply& reply,
                     std::span<const std::byte> bytes) {
  if ((reply.flags & kHasDigest) == 0) return false;
  const Blake3Digest digest = BytesDigest(keys, reply.id, bytes);
  return CRYPTO_memcmp(digest.data(), reply.digest.data(), digest.size()) == 0;
}

Result<ReadReply> DecodeReply(const DataChannelKeys& keys, std::span<const std::uint8_t> header) {
  if (header.size() != sizeof(ReadReply)) {
    return Status(ErrorCode::kInvalidArgument,
                  "a data channel reply header of " + std::to_string(header.size()) +
                      " bytes (expected " + std::to_string(sizeof(ReadReply)) + ")");
  }
  ReadReply reply;
  std::memcpy(&reply, header.data(), sizeof(reply));
  if ((reply.flags & ~kHasDigest) != 0) {
    return Status(ErrorCode::kInvalidArgument, "a data channel reply with unknown flags");
  }
  if (reply.status != 0 && (reply.size != 0 || reply.flags != 0)) {
    return Status(ErrorCode::kInvalidArgument, "a data channel refusal that carries bytes");
  }
  if (!ReplySigned(keys, reply)) {
    return Status(ErrorCode::kPermissionDenied, "a data channel reply whose MAC does not hold");
  }
  return reply;
}

}  // namespace lmcache::fleet
