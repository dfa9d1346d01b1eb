// libFuzzer target: the L2 object format (tier/object_format.h), which reads
// bytes from disk and from Redis: anything another process or a bad disk can
// leave there. Beyond "no crash, no sanitizer report": a header that parses
// names a valid key and an encoding that fits its payload, an object that
// verifies re-encodes to a header that parses to the same key, length,
// checksum and encoding, and an encoded one decodes into its object's size
// (or, a lossless frame that does not decode, is refused as corrupt).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "tier/object_format.h"

namespace {

using namespace lmcache;

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  Result<tier::ObjectHeader> header = tier::ParseObjectHeader(bytes);
  if (!header.ok()) {
    Check(header.status().code() == ErrorCode::kCorrupt ||
          header.status().code() == ErrorCode::kNotSupported);
    return 0;
  }
  Check(header->header_bytes <= size);
  Check(store::ValidateObjectKey(header->key).ok());
  const auto rest = bytes.subspan(header->header_bytes);
  if (rest.size() < header->payload_bytes) return 0;
  const auto payload = rest.first(header->payload_bytes);
  if (!tier::VerifyObject(*header, header->key, payload).ok()) return 0;
  Check(tier::CheckEncoding(header->encoding, header->payload_bytes).ok());
  const std::string again = tier::EncodeObjectHeader(header->key, payload, 1, header->encoding);
  Result<tier::ObjectHeader> reparsed =
      tier::ParseObjectHeader(std::as_bytes(std::span(again.data(), again.size())));
  Check(reparsed.ok());
  Check(reparsed->key == header->key && reparsed->payload_bytes == header->payload_bytes &&
        reparsed->payload_checksum == header->payload_checksum &&
        reparsed->encoding == header->encoding);
  // A payload that verified decodes into a buffer of the object's size
  // (fp8's follows from the payload's; a lossless header may claim any size,
  // which an adapter never allocates, as it reads into the L1 buffer of the
  // size it expects: here it is bounded instead).
  if (header->object_bytes() > (std::size_t{64} << 20)) return 0;
  std::vector<std::byte> object(header->object_bytes());
  std::copy(payload.begin(), payload.end(), object.begin());
  const Status decoded = tier::VerifyAndDecode(*header, header->key, object);
  // fp8 always decodes; a lossless frame that does not is corrupt, not a crash.
  Check(decoded.ok() || (header->encoding.codec == tier::PayloadCodec::kLossless &&
                         decoded.code() == ErrorCode::kCorrupt));
  return 0;
}
