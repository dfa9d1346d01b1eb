// The wire form of the UCX data channel's two messages (UcxChannel,
// fleet/ucx_channel.h) and how each is authenticated (issue 62, section 1;
// docs/security.md, "The data channel").
//
// A read request carries a read id of 128 random bits, the range, the
// owner's lookup task and a MAC under the fleet's data key. Its reply
// carries the same id, the status, the size of the bytes that follow, a
// keyed BLAKE3 digest of those bytes (when the request asked for one) and a
// MAC over all of that under a key of its own derived from the data key.
// Nobody without the fleet key can make a reply a requester accepts; an
// off-path host cannot even aim one at a read (it cannot guess the id); a
// member that is not the owner a read went to has its reply refused by the
// endpoint check (UcxChannel); and bytes changed after the owner digested
// them (in flight, or in the owner's slot while they were being sent) fail
// the digest: the read fails, its slot is never admitted.
//
// Little-endian hosts only: the fleet's members run the same build on
// x86-64 or arm64.
//
// Thread-safety: pure functions and plain values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/blake3.h"
#include "lmcache/status.h"

namespace lmcache::fleet {

// Active message ids: a read request, and its reply carrying the bytes.
inline constexpr unsigned kReadRequestId = 0x4c31;  // "L1"
inline constexpr unsigned kReadReplyId = 0x4c32;

inline constexpr std::size_t kReadIdBytes = 16;
inline constexpr std::size_t kMacBytes = 16;
using ReadId = std::array<std::uint8_t, kReadIdBytes>;
using FleetDataKey = std::array<std::uint8_t, 32>;

// Request flag: the requester wants a digest of the reply's bytes.
inline constexpr std::uint32_t kWantDigest = 1;
// Reply flag: `digest` covers the bytes that follow.
inline constexpr std::uint32_t kHasDigest = 1;

struct ReadRequest {
  ReadId id{};
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::int64_t task = 0;  // the owner's lookup task whose lock the read goes through
  std::uint32_t flags = 0;
  std::uint32_t reserved = 0;
  std::uint8_t mac[kMacBytes] = {};
};
struct ReadReply {
  ReadId id{};
  std::uint64_t size = 0;    // bytes that follow as the message's data (0 unless status is 0)
  std::uint32_t status = 0;  // ErrorCode: 0 = the bytes follow
  std::uint32_t flags = 0;
  Blake3Digest digest{};     // keyed digest of the id and the bytes, when kHasDigest
  std::uint8_t mac[kMacBytes] = {};
};
static_assert(sizeof(ReadRequest) == 64 && sizeof(ReadReply) == 80);

// The keys of one channel, derived once from the fleet's data key.
struct DataChannelKeys {
  FleetDataKey request;  // the data key itself: read requests' MACs
  Blake3Digest reply;  // replies' MACs
  Blake3Digest bytes;  // digests of replies' bytes
  static DataChannelKeys From(const FleetDataKey& data_key);
  void Wipe();
};

// A fresh id of 128 bits from the system's CSPRNG.
ReadId NewReadId();

// MAC of a request's fields (truncated HMAC-SHA256 under keys.request).
void SignRequest(const DataChannelKeys& keys, ReadRequest* request);
bool RequestSigned(const DataChannelKeys& keys, const ReadRequest& request);

// A reply: its digest (when the request asked for one) over `bytes`, then
// its MAC over every other field.
void SignReply(const DataChannelKeys& keys, std::span<const std::byte> bytes, ReadReply* reply);
// Whether the reply's header is what a member made (its MAC, constant time).
bool ReplySigned(const DataChannelKeys& keys, const ReadReply& reply);
// Whether `bytes` are the bytes the reply's digest covers.
bool ReplyBytesMatch(const DataChannelKeys& keys, const ReadReply& reply,
                     std::span<const std::byte> bytes);

// Decodes a reply's header as it arrived (untrusted): the size must be
// exact, no unknown flag set, a status other than 0 must carry no size, and
// its MAC must hold. kInvalidArgument for a malformed header,
// kPermissionDenied for one whose MAC fails.
Result<ReadReply> DecodeReply(const DataChannelKeys& keys, std::span<const std::uint8_t> header);

}  // namespace lmcache::fleet
