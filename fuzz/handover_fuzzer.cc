// libFuzzer target: the takeover protocol's decoders (restart/handover_codec.h).
// A server reads a hello from whoever connects to its takeover socket, and a
// successor reads the verdict and the image its predecessor sends: bytes of
// another process. The first input byte picks the decoder. Beyond "no crash,
// no sanitizer report": every failure is kMalformedRequest, and the format is
// canonical, so what decodes re-encodes to the very same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "restart/handover_codec.h"

namespace {

using namespace lmcache;

void Check(bool condition) {
  if (!condition) std::abort();
}

template <typename Decoded, typename Encode>
void RoundTrip(const Result<Decoded>& decoded, std::string_view input, Encode encode) {
  if (!decoded.ok()) {
    Check(decoded.status().code() == ErrorCode::kMalformedRequest);
    return;
  }
  Check(encode(*decoded) == input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: RoundTrip(restart::DecodeHello(input), input, restart::EncodeHello); break;
    case 1: RoundTrip(restart::DecodeVerdict(input), input, restart::EncodeVerdict); break;
    default: RoundTrip(restart::DecodeImage(input), input, restart::EncodeImage); break;
  }
  return 0;
}
