// Test inputs for the fp8 serde: bfloat16 tensors whose every value is an
// e4m3 value (so a round trip through the tier is byte-exact), laid out as
// an L1 object holds them.
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tier/payload_codec.h"

namespace lmcache::testing {

inline std::vector<std::byte> Fp8ExactBFloat16Bytes(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> out(bytes);
  std::uint32_t state = seed * 2654435761u + 1;
  for (std::size_t i = 0; i + 1 < bytes; i += 2) {
    state = state * 1664525u + 1013904223u;
    auto code = static_cast<std::uint8_t>(state >> 24);
    if ((code & 0x7F) == 0x7F) code ^= 0x01;  // not NaN, whose bits vary
    const float value = tier::FloatFromFp8(tier::PayloadCodec::kFp8E4M3, code);
    const auto bf16 = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(value) >> 16);
    std::memcpy(out.data() + i, &bf16, 2);
  }
  return out;
}

}  // namespace lmcache::testing
