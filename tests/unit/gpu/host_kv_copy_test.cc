// HostGather / HostScatter (the emulation, with csrc/kv_index.h's math, the
// very arithmetic the CUDA kernels run) over the tensors vLLM allocates
// (tests/fakes/vllm_kv_cache.h), for every format the server accepts,
// element sizes 1, 2 and 4 and head widths that are and are not multiples of
// 16 bytes: every byte of the object is where the format's CPU object says
// (split: [2, L, T, NH*HS]; packed: [1, L, T, NH*2HS], K then V per head;
// MLA: [1, L, T, C]), and a scatter writes exactly the blocks it names.
#include "gpu/host_kv_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "fakes/vllm_kv_cache.h"
#include "gpu/kv_layout.h"

namespace lmcache::gpu {
namespace {

using testing::Cache;
using testing::Layout;

struct Case {
  Layout layout;
  std::uint32_t element_size;
  std::int64_t head_size;
  std::int64_t heads;
};

std::byte Pattern(std::uint64_t offset) { return static_cast<std::byte>((offset * 7 + offset / 251 + 1) & 0xff); }

class HostKvCopyTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    g_.layers = 3;
    g_.blocks = 8;
    g_.block_size = 4;
    g_.heads = c.heads;
    g_.head_size = c.head_size;
    g_.element_size = c.element_size;
    g_.dtype = c.element_size == 1 ? "uint8" : c.element_size == 2 ? "bfloat16" : "float32";
    g_.pad = 5;
    g_.storage_byte_offset = 1024;
    protocol::MemHandle handle{};
    cache_ = testing::MakeCache(c.layout, g_, handle);
    auto layout = DetectKvLayout(testing::Registration({&cache_}), kChunk);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    layout_ = *layout;
  }

  std::vector<std::byte> Allocation(bool patterned) const {
    std::vector<std::byte> a(cache_.allocation_bytes);
    if (patterned) {
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = Pattern(i);
    }
    return a;
  }
  std::vector<std::byte*> Bases(std::vector<std::byte>& allocation) const {
    std::vector<std::byte*> bases;
    for (const LayerRef& l : layout_.groups[0].layers) bases.push_back(allocation.data() + l.first_byte);
    return bases;
  }
  kv::ChunkCopy Copy(const std::vector<std::int32_t>& ids, std::int64_t tokens, std::int64_t skip) const {
    const KvGroupLayout& g = layout_.groups[0];
    return {g.paged, g.object(), ids.data(), tokens, skip};
  }
  bool Mla() const { return testing::Mla(GetParam().layout); }
  std::int64_t Kvs() const { return Mla() ? 1 : 2; }
  std::int64_t Heads() const { return Mla() ? 1 : g_.heads; }
  std::int64_t HeadBytes() const { return g_.head_size * g_.element_size; }
  // Where (layer, kv, token, head, byte) sits in the object, stated from the format.
  std::uint64_t ObjectByte(std::int64_t layer, std::int64_t kv, std::int64_t token, std::int64_t head,
                           std::int64_t byte) const {
    const std::int64_t hb = HeadBytes();
    const bool split = layout_.groups[0].paged.planes == 2;
    const std::int64_t row = Heads() * hb * (split || Mla() ? 1 : 2);
    const std::int64_t plane = split ? kv : 0;
    const std::int64_t in_row = split || Mla() ? head * hb + byte : head * 2 * hb + kv * hb + byte;
    return static_cast<std::uint64_t>(((plane * g_.layers + layer) * kChunk + token) * row + in_row);
  }

  static constexpr std::int64_t kChunk = 8;  // two blocks of four
  testing::Geometry g_;
  Cache cache_;
  KvLayout layout_;
};

TEST_P(HostKvCopyTest, GatherPutsEveryByteWhereTheObjectLayoutSays) {
  auto source = Allocation(true);
  const std::vector<std::int32_t> ids = {6, 1};  // the chunk's blocks, out of order
  std::vector<std::byte> object(layout_.object_bytes, std::byte{0xEE});
  ASSERT_EQ(object.size(), static_cast<std::size_t>(Kvs() * g_.layers * kChunk * Heads() * HeadBytes()));
  HostGather(Copy(ids, kChunk, 0), Bases(source), object.data());
  for (std::int64_t l = 0; l < g_.layers; ++l) {
    for (std::int64_t kv = 0; kv < Kvs(); ++kv) {
      for (std::int64_t t = 0; t < kChunk; ++t) {
        for (std::int64_t h = 0; h < Heads(); ++h) {
          for (std::int64_t b = 0; b < HeadBytes(); ++b) {
            const std::uint64_t from = cache_.ElementByte(l, kv, ids[t / g_.block_size], t % g_.block_size, h, b);
            ASSERT_EQ(object[ObjectByte(l, kv, t, h, b)], Pattern(from))
                << "layer " << l << " kv " << kv << " token " << t << " head " << h << " byte " << b;
          }
        }
      }
    }
  }
}

TEST_P(HostKvCopyTest, ScatterIntoOtherBlocksWritesExactlyThoseBlocks) {
  auto source = Allocation(true);
  auto target = Allocation(false);
  const std::vector<std::int32_t> from = {2, 5};
  const std::vector<std::int32_t> to = {7, 3};
  std::vector<std::byte> object(layout_.object_bytes);
  HostGather(Copy(from, kChunk, 0), Bases(source), object.data());
  HostScatter(Copy(to, kChunk, 0), Bases(target), object.data());
  std::vector<bool> written(target.size());
  for (std::int64_t l = 0; l < g_.layers; ++l) {
    for (std::int64_t kv = 0; kv < Kvs(); ++kv) {
      for (std::size_t i = 0; i < to.size(); ++i) {
        for (std::int64_t r = 0; r < g_.block_size; ++r) {
          for (std::int64_t h = 0; h < Heads(); ++h) {
            for (std::int64_t b = 0; b < HeadBytes(); ++b) {
              const std::uint64_t dst = cache_.ElementByte(l, kv, to[i], r, h, b);
              ASSERT_EQ(target[dst], source[cache_.ElementByte(l, kv, from[i], r, h, b)]);
              written[dst] = true;
            }
          }
        }
      }
    }
  }
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (!written[i]) {
      ASSERT_EQ(target[i], std::byte{0}) << "byte " << i << " written";
    }
  }
}

TEST_P(HostKvCopyTest, ScatterLeavesSkippedTokensNullBlocksAndTokensPastThePart) {
  auto source = Allocation(true);
  auto target = Allocation(false);
  std::vector<std::byte> object(layout_.object_bytes);
  HostGather(Copy({0, 1}, kChunk, 0), Bases(source), object.data());
  // Skip the first block; the second block is the engine's null block (-1).
  HostScatter(Copy({4, -1}, kChunk, g_.block_size), Bases(target), object.data());
  for (std::size_t i = 0; i < target.size(); ++i) ASSERT_EQ(target[i], std::byte{0}) << "byte " << i;
  // Only the first tokens of a chunk: the rest of the block stays.
  HostScatter(Copy({4, 5}, g_.block_size + 1, 0), Bases(target), object.data());
  EXPECT_EQ(target[cache_.ElementByte(0, 0, 5, 0, 0, 0)], source[cache_.ElementByte(0, 0, 1, 0, 0, 0)]);
  EXPECT_EQ(target[cache_.ElementByte(0, 0, 5, 1, 0, 0)], std::byte{0}) << "past the tokens";
  EXPECT_EQ(target[cache_.ElementByte(1, Kvs() - 1, 4, 3, Heads() - 1, HeadBytes() - 1)],
            source[cache_.ElementByte(1, Kvs() - 1, 0, 3, Heads() - 1, HeadBytes() - 1)]);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, HostKvCopyTest,
    ::testing::Values(Case{Layout::kFlashAttnNhd, 2, 64, 2}, Case{Layout::kFlashAttnHnd, 2, 64, 3},
                      Case{Layout::kBlocksFirstNhd, 4, 64, 2}, Case{Layout::kBlocksFirstHnd, 1, 160, 2},
                      Case{Layout::kPackedHnd, 2, 128, 2}, Case{Layout::kPackedNhd, 1, 128, 3},
                      Case{Layout::kSharedLbhnc, 2, 64, 2}, Case{Layout::kSharedLbnhc, 4, 40, 2},
                      Case{Layout::kSharedBlhnc, 2, 7, 2},  // 14-byte heads: no 16-byte vectors
                      Case{Layout::kMla, 1, 576, 1}, Case{Layout::kMla, 1, 656, 1},
                      Case{Layout::kSharedMla4d, 2, 288, 1}, Case{Layout::kCrossLayer, 2, 64, 2},
                      Case{Layout::kFlashAttnHnd, 2, 64, 1}, Case{Layout::kSharedLbnhc, 2, 64, 1}),
    [](const ::testing::TestParamInfo<Case>& param) {
      return "case" + std::to_string(param.index) + "_e" + std::to_string(param.param.element_size) + "_hs" +
             std::to_string(param.param.head_size);
    });

}  // namespace
}  // namespace lmcache::gpu
