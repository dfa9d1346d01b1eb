// libFuzzer target: a peer's UCX descriptor (fleet/ucx_channel.h), which
// arrives from another server and is untrusted. Beyond "no crash, no
// sanitizer report": a descriptor that parses has a bounded address and a
// pool, and re-encodes to exactly the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fleet/ucx_descriptor.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto parsed = lmcache::fleet::UcxDescriptor::Parse(bytes);
  if (!parsed.ok()) return 0;
  if (parsed->worker_address.empty() || parsed->worker_address.size() > 64 * 1024 ||
      parsed->size == 0 || parsed->Encode() != bytes) {
    std::abort();
  }
  return 0;
}
