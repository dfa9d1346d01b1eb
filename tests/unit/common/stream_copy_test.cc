#include "common/stream_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace lmcache {
namespace {

std::vector<std::uint8_t> Pattern(std::size_t size, std::uint32_t seed) {
  std::vector<std::uint8_t> bytes(size);
  std::uint32_t x = seed;
  for (auto& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(x >> 24);
  }
  return bytes;
}

// Every size around the streaming threshold and the line size, at every
// source and destination misalignment within a line: the bytes arrive exactly,
// and not one byte before or after the destination range is written.
TEST(StreamCopy, CopiesExactlyAtEveryAlignmentAndSize) {
  constexpr std::size_t kGuard = 192;
  for (const std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{4096},
        kStreamCopyMinBytes - 1, kStreamCopyMinBytes, kStreamCopyMinBytes + 1,
        kStreamCopyMinBytes + 63, kStreamCopyMinBytes + 65, std::size_t{3} << 20}) {
    const std::vector<std::uint8_t> src = Pattern(size + kGuard, static_cast<std::uint32_t>(size));
    for (const std::size_t dst_shift : {0u, 1u, 17u, 63u}) {
      for (const std::size_t src_shift : {0u, 5u, 32u}) {
        std::vector<std::uint8_t> dst(size + kGuard, 0xAB);
        StreamCopy(dst.data() + dst_shift, src.data() + src_shift, size);
        for (std::size_t i = 0; i < dst_shift; ++i) ASSERT_EQ(dst[i], 0xAB) << size;
        for (std::size_t i = 0; i < size; ++i) {
          ASSERT_EQ(dst[dst_shift + i], src[src_shift + i])
              << "size " << size << " dst+" << dst_shift << " src+" << src_shift << " at " << i;
        }
        for (std::size_t i = dst_shift + size; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB) << size;
      }
    }
  }
}

}  // namespace
}  // namespace lmcache
