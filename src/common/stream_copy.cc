#include "common/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lmcache {

#if defined(__x86_64__)
namespace {

constexpr std::size_t kLineBytes = 64;

// Each loop moves whole cache lines to a 64-byte aligned destination, so every
// line is written in full and leaves the write-combining buffer at once.
__attribute__((target("avx2"))) void StreamLinesAvx2(std::byte* dst, const std::byte* src,
                                                     std::size_t lines) {
  for (std::size_t i = 0; i < lines; ++i, dst += kLineBytes, src += kLineBytes) {
    const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), low);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), high);
  }
}

void StreamLinesSse2(std::byte* dst, const std::byte* src, std::size_t lines) {
  for (std::size_t i = 0; i < lines; ++i, dst += kLineBytes, src += kLineBytes) {
    for (std::size_t q = 0; q < kLineBytes; q += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + q));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + q), v);
    }
  }
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") != 0;
  return has;
}

}  // namespace

void StreamCopy(void* dst, const void* src, std::size_t size) {
  if (size < kStreamCopyMinBytes) {
    std::memcpy(dst, src, size);
    return;
  }
  auto* out = static_cast<std::byte*>(dst);
  const auto* in = static_cast<const std::byte*>(src);
  const std::size_t head =
      (kLineBytes - reinterpret_cast<std::uintptr_t>(out) % kLineBytes) % kLineBytes;
  std::memcpy(out, in, head);
  out += head;
  in += head;
  size -= head;
  const std::size_t lines = size / kLineBytes;
  if (HasAvx2()) {
    StreamLinesAvx2(out, in, lines);
  } else {
    StreamLinesSse2(out, in, lines);
  }
  _mm_sfence();
  const std::size_t done = lines * kLineBytes;
  std::memcpy(out + done, in + done, size - done);
}

#else

void StreamCopy(void* dst, const void* src, std::size_t size) { std::memcpy(dst, src, size); }

#endif

}  // namespace lmcache
