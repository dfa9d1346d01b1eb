// Fuzz target: a data channel reply header as a peer (or anyone who reaches
// the channel) sends it (fleet/ucx_wire.h). Decoding never crashes or reads
// past the input; what decodes has a MAC that holds, and a header changed in
// any byte after decoding no longer does.
#include <cstdint>
#include <cstring>
#include <span>

#include "fleet/ucx_wire.h"

namespace {

const lmcache::fleet::DataChannelKeys& Keys() {
  static const lmcache::fleet::DataChannelKeys keys = [] {
    lmcache::fleet::FleetDataKey key;
    for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i);
    return lmcache::fleet::DataChannelKeys::From(key);
  }();
  return keys;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace lmcache::fleet;
  // The input as it arrives, and the input re-signed (so the fuzzer also
  // reaches what lies past the MAC: the field checks and the digest).
  auto decoded = DecodeReply(Keys(), std::span(data, size));
  if (decoded.ok() && !ReplySigned(Keys(), *decoded)) __builtin_trap();
  if (size < sizeof(ReadReply)) return 0;
  ReadReply reply;
  std::memcpy(&reply, data, sizeof(reply));
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data) + sizeof(reply),
                                         size - sizeof(reply));
  SignReply(Keys(), bytes, &reply);
  auto resigned = DecodeReply(Keys(), std::span(reinterpret_cast<const std::uint8_t*>(&reply),
                                                sizeof(reply)));
  if (resigned.ok()) {
    if ((reply.flags & kHasDigest) && !ReplyBytesMatch(Keys(), reply, bytes)) __builtin_trap();
    ReadReply changed = reply;
    reinterpret_cast<std::uint8_t*>(&changed)[size % sizeof(changed)] ^= 1;
    if (ReplySigned(Keys(), changed)) __builtin_trap();
  }
  return 0;
}
