#include "common/blake3.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace lmcache {
namespace {

using Cv = std::array<std::uint32_t, 8>;
using BlockWords = std::array<std::uint32_t, 16>;

constexpr Cv kIv = {0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
                    0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19};

constexpr std::uint32_t kChunkStart = 1;
constexpr std::uint32_t kChunkEnd = 2;
constexpr std::uint32_t kParent = 4;
constexpr std::uint32_t kRoot = 8;

constexpr int kRounds = 7;

// The spec permutes the message words between rounds; instead, precompute which original word
// each round reads at each position, so the compression never moves message words around.
constexpr std::array<std::array<std::uint8_t, 16>, kRounds> MakeSchedule() {
  constexpr std::array<std::uint8_t, 16> kPermutation = {2, 6,  3,  10, 7, 0,  4,  13,
                                                         1, 11, 12, 5,  9, 14, 15, 8};
  std::array<std::array<std::uint8_t, 16>, kRounds> schedule{};
  for (std::uint8_t i = 0; i < 16; ++i) schedule[0][i] = i;
  for (int r = 1; r < kRounds; ++r) {
    for (int i = 0; i < 16; ++i) schedule[r][i] = schedule[r - 1][kPermutation[i]];
  }
  return schedule;
}
constexpr auto kSchedule = MakeSchedule();

inline void G(std::uint32_t& a, std::uint32_t& b, std::uint32_t& c, std::uint32_t& d,
              std::uint32_t x, std::uint32_t y) {
  a = a + b + x;
  d = std::rotr(d ^ a, 16);
  c = c + d;
  b = std::rotr(b ^ c, 12);
  a = a + b + y;
  d = std::rotr(d ^ a, 8);
  c = c + d;
  b = std::rotr(b ^ c, 7);
}

// R is a template parameter so every schedule index is a compile-time constant and the
// compiler keeps the 16 state words and the message in registers.
template <int R>
inline void Round(std::uint32_t (&v)[16], const BlockWords& m) {
  constexpr auto& s = kSchedule[R];
  // Columns.
  G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
  G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
  G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
  G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
  // Diagonals.
  G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
  G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
  G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
  G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
}

template <int... R>
inline void AllRounds(std::uint32_t (&v)[16], const BlockWords& m,
                      std::integer_sequence<int, R...>) {
  (Round<R>(v, m), ...);
}

// The compression function, truncated to the 8 words every caller here needs: the new
// chaining value, which for a ROOT compression with counter 0 is also the 32-byte digest.
inline void Compress(Cv& cv, const BlockWords& m, std::uint64_t counter, std::uint32_t block_len,
                     std::uint32_t flags) {
  std::uint32_t v[16] = {cv[0],
                         cv[1],
                         cv[2],
                         cv[3],
                         cv[4],
                         cv[5],
                         cv[6],
                         cv[7],
                         kIv[0],
                         kIv[1],
                         kIv[2],
                         kIv[3],
                         static_cast<std::uint32_t>(counter),
                         static_cast<std::uint32_t>(counter >> 32),
                         block_len,
                         flags};
  AllRounds(v, m, std::make_integer_sequence<int, kRounds>{});
  for (int i = 0; i < 8; ++i) cv[i] = v[i] ^ v[i + 8];
}

inline BlockWords LoadBlock(const std::uint8_t* bytes) {
  BlockWords m;
  std::memcpy(m.data(), bytes, sizeof(m));
  if constexpr (std::endian::native == std::endian::big) {
    for (auto& w : m) {
      w = (w >> 24) | ((w >> 8) & 0xFF00u) | ((w << 8) & 0xFF0000u) | (w << 24);
    }
  }
  return m;
}

inline BlockWords ParentBlock(const Cv& left, const Cv& right) {
  BlockWords m;
  for (int i = 0; i < 8; ++i) {
    m[i] = left[i];
    m[i + 8] = right[i];
  }
  return m;
}

inline Cv ParentCv(const Cv& left, const Cv& right) {
  Cv cv = kIv;
  Compress(cv, ParentBlock(left, right), 0, 64, kParent);
  return cv;
}

}  // namespace

Blake3Hasher::Blake3Hasher() { Reset(); }

void Blake3Hasher::Reset() {
  chunk_cv_ = kIv;
  chunk_counter_ = 0;
  blocks_compressed_ = 0;
  block_.fill(0);
  block_len_ = 0;
  cv_stack_len_ = 0;
}

void Blake3Hasher::CompressChunkBlock(const std::uint8_t* block) {
  const std::uint32_t flags = blocks_compressed_ == 0 ? kChunkStart : 0;
  Compress(chunk_cv_, LoadBlock(block), chunk_counter_, kBlockLen, flags);
  ++blocks_compressed_;
}

void Blake3Hasher::FinishChunk() {
  // Only called on a full chunk with more input to come, so the chunk is neither short nor
  // the root: its last block is a full one with CHUNK_END.
  const std::uint32_t flags = kChunkEnd | (blocks_compressed_ == 0 ? kChunkStart : 0);
  Compress(chunk_cv_, LoadBlock(block_.data()), chunk_counter_, kBlockLen, flags);
  PushChunkCv(chunk_cv_, chunk_counter_ + 1);
  ++chunk_counter_;
  chunk_cv_ = kIv;
  blocks_compressed_ = 0;
  block_len_ = 0;
}

void Blake3Hasher::PushChunkCv(Cv cv, std::uint64_t total_chunks) {
  // Each trailing zero bit of the chunk count is a subtree this chunk completes; merging only
  // then ("lazily") keeps the rightmost subtree open, so the final chunk is never merged early.
  while ((total_chunks & 1) == 0) {
    cv = ParentCv(cv_stack_[--cv_stack_len_], cv);
    total_chunks >>= 1;
  }
  cv_stack_[cv_stack_len_++] = cv;
}

void Blake3Hasher::Update(const void* data, std::size_t size) {
  Update(std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(data), size));
}

void Blake3Hasher::Update(std::span<const std::uint8_t> data) {
  const std::uint8_t* p = data.data();
  std::size_t n = data.size();
  while (n > 0) {
    // Buffered data is final only while nothing follows it; here something does.
    if (ChunkBytes() == kChunkLen) FinishChunk();
    if (block_len_ == kBlockLen) {
      CompressChunkBlock(block_.data());
      block_len_ = 0;
    }
    // Fast path: whole blocks straight from the input, except the chunk's last block and the
    // input's last block, which go through block_ because their flags are not known yet.
    if (block_len_ == 0) {
      while (n > kBlockLen && blocks_compressed_ + 1 < kChunkLen / kBlockLen) {
        CompressChunkBlock(p);
        p += kBlockLen;
        n -= kBlockLen;
      }
    }
    const std::size_t take = std::min(n, kBlockLen - block_len_);
    std::memcpy(block_.data() + block_len_, p, take);
    block_len_ += take;
    p += take;
    n -= take;
  }
}

Blake3Digest Blake3Hasher::Finalize() const {
  // The current chunk's last block, zero-padded (block_ may hold stale bytes past block_len_).
  std::array<std::uint8_t, kBlockLen> padded{};
  std::memcpy(padded.data(), block_.data(), block_len_);

  // The node that becomes the root: the current chunk's last block if the tree has a single
  // chunk, otherwise the parent joining the left subtrees with the current chunk's CV.
  Cv cv = chunk_cv_;
  BlockWords m = LoadBlock(padded.data());
  std::uint64_t counter = chunk_counter_;
  auto block_len = static_cast<std::uint32_t>(block_len_);
  std::uint32_t flags = kChunkEnd | (blocks_compressed_ == 0 ? kChunkStart : 0);
  for (std::size_t i = cv_stack_len_; i > 0; --i) {
    Compress(cv, m, counter, block_len, flags);  // the previous node was not the root
    m = ParentBlock(cv_stack_[i - 1], cv);
    cv = kIv;
    counter = 0;
    block_len = kBlockLen;
    flags = kParent;
  }
  // Root output block 0: the XOF's first 32 bytes, i.e. the truncated compression with counter 0.
  Compress(cv, m, 0, block_len, flags | kRoot);

  Blake3Digest digest;
  for (int i = 0; i < 8; ++i) {
    for (int b = 0; b < 4; ++b) digest[4 * i + b] = static_cast<std::uint8_t>(cv[i] >> (8 * b));
  }
  return digest;
}

Blake3Digest Blake3(std::span<const std::uint8_t> data) {
  Blake3Hasher hasher;
  hasher.Update(data);
  return hasher.Finalize();
}

std::string ToHex(const Blake3Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * digest.size(), '0');
  for (std::size_t i = 0; i < digest.size(); ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 0xF];
  }
  return hex;
}

}  // namespace lmcache
