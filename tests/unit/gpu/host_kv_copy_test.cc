// HostGather / HostScatter (the emulation, with csrc/kv_index.h's math) against
// an independent statement of each layout: the element (plane, block, row,
// head, byte) of an NHD, HND or MLA cache sits where the layout's C-order
// shape says, and lands in the object at [plane, layer, token, head*bytes].
#include "gpu/host_kv_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu/kv_layout.h"

namespace lmcache::gpu {
namespace {

struct Case {
  KvFormat format;
  std::int64_t blocks, block_size, heads, head_size, element_size, layers, chunk;
};

protocol::DeviceIpcWrapper Tensor(const Case& c) {
  protocol::DeviceIpcWrapper w;
  w.dtype = c.element_size == 2 ? "bfloat16" : "float32";
  w.element_size = static_cast<std::uint32_t>(c.element_size);
  switch (c.format) {
    case KvFormat::kNhd: w.shape = {2, c.blocks, c.block_size, c.heads, c.head_size}; break;
    case KvFormat::kHnd: w.shape = {2, c.blocks, c.heads, c.block_size, c.head_size}; break;
    case KvFormat::kMla: w.shape = {c.blocks, c.block_size, c.head_size}; break;
  }
  std::int64_t acc = 1;
  w.stride.resize(w.shape.size());
  for (std::size_t i = w.shape.size(); i-- > 0;) {
    w.stride[i] = acc;
    acc *= w.shape[i];
  }
  w.storage_bytes = static_cast<std::uint64_t>(acc * c.element_size);
  w.device_uuid = "emulated";
  return w;
}

// The byte offset of (plane, block, row, head, byte) in one layer, stated directly.
std::int64_t Where(const Case& c, std::int64_t plane, std::int64_t block, std::int64_t row,
                   std::int64_t head, std::int64_t byte) {
  const std::int64_t hb = c.head_size * c.element_size;
  switch (c.format) {
    case KvFormat::kNhd:
      return (((plane * c.blocks + block) * c.block_size + row) * c.heads + head) * hb + byte;
    case KvFormat::kHnd:
      return (((plane * c.blocks + block) * c.heads + head) * c.block_size + row) * hb + byte;
    case KvFormat::kMla: return (block * c.block_size + row) * hb + byte;
  }
  return -1;
}

std::byte Pattern(std::int64_t layer, std::int64_t offset) {
  return static_cast<std::byte>((layer * 131 + offset * 7 + offset / 251) & 0xff);
}

class HostKvCopyTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    c_ = GetParam();
    std::vector<protocol::DeviceIpcWrapper> tensors(static_cast<std::size_t>(c_.layers), Tensor(c_));
    LayoutHints hints;
    if (c_.format == KvFormat::kHnd) hints.kv_layout = "HND";
    auto layout = DetectKvLayout(tensors, hints);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    layout_ = *layout;
    bytes_ = static_cast<std::int64_t>(tensors[0].storage_bytes);
  }
  std::vector<std::vector<std::byte>> Caches(bool patterned) const {
    std::vector<std::vector<std::byte>> caches(static_cast<std::size_t>(c_.layers),
                                               std::vector<std::byte>(static_cast<std::size_t>(bytes_)));
    if (!patterned) return caches;
    for (std::int64_t l = 0; l < c_.layers; ++l) {
      for (std::int64_t i = 0; i < bytes_; ++i) caches[l][i] = Pattern(l, i);
    }
    return caches;
  }
  static std::vector<std::byte*> Bases(std::vector<std::vector<std::byte>>& caches) {
    std::vector<std::byte*> bases;
    for (auto& cache : caches) bases.push_back(cache.data());
    return bases;
  }
  kv::ChunkCopy Copy(const std::vector<std::int32_t>& ids, std::int64_t tokens, std::int64_t skip) const {
    return {layout_.geometry, layout_.Object(c_.chunk), ids.data(), tokens, skip};
  }

  Case c_{};
  KvLayout layout_;
  std::int64_t bytes_ = 0;
};

TEST_P(HostKvCopyTest, GatherPutsEveryByteWhereTheObjectLayoutSays) {
  auto caches = Caches(true);
  const std::vector<std::int32_t> ids = {5, 0, 3, 7};  // the chunk's blocks, out of order
  const std::int64_t planes = c_.format == KvFormat::kMla ? 1 : 2;
  const std::int64_t heads = c_.format == KvFormat::kMla ? 1 : c_.heads;
  const std::int64_t hb = c_.head_size * c_.element_size;
  std::vector<std::byte> object(layout_.ObjectBytes(c_.chunk), std::byte{0xEE});
  ASSERT_EQ(object.size(), static_cast<std::size_t>(planes * c_.layers * c_.chunk * heads * hb));
  HostGather(Copy(ids, c_.chunk, 0), Bases(caches), object.data());
  std::size_t at = 0;
  for (std::int64_t p = 0; p < planes; ++p) {
    for (std::int64_t l = 0; l < c_.layers; ++l) {
      for (std::int64_t t = 0; t < c_.chunk; ++t) {
        for (std::int64_t h = 0; h < heads; ++h) {
          for (std::int64_t b = 0; b < hb; ++b, ++at) {
            const std::int64_t from = Where(c_, p, ids[t / c_.block_size], t % c_.block_size, h, b);
            ASSERT_EQ(object[at], Pattern(l, from)) << "plane " << p << " layer " << l << " token " << t;
          }
        }
      }
    }
  }
}

TEST_P(HostKvCopyTest, ScatterIntoOtherBlocksRestoresEveryBlockAndTouchesNothingElse) {
  auto source = Caches(true);
  auto target = Caches(false);
  const std::vector<std::int32_t> from = {1, 2, 4, 6};
  const std::vector<std::int32_t> to = {7, 3, 0, 5};
  std::vector<std::byte> object(layout_.ObjectBytes(c_.chunk));
  HostGather(Copy(from, c_.chunk, 0), Bases(source), object.data());
  HostScatter(Copy(to, c_.chunk, 0), Bases(target), object.data());
  const std::int64_t planes = c_.format == KvFormat::kMla ? 1 : 2;
  const std::int64_t heads = c_.format == KvFormat::kMla ? 1 : c_.heads;
  const std::int64_t hb = c_.head_size * c_.element_size;
  std::vector<bool> written(static_cast<std::size_t>(bytes_));
  for (std::int64_t l = 0; l < c_.layers; ++l) {
    std::fill(written.begin(), written.end(), false);
    for (std::int64_t p = 0; p < planes; ++p) {
      for (std::size_t i = 0; i < to.size(); ++i) {
        for (std::int64_t r = 0; r < c_.block_size; ++r) {
          for (std::int64_t h = 0; h < heads; ++h) {
            for (std::int64_t b = 0; b < hb; ++b) {
              const std::int64_t dst = Where(c_, p, to[i], r, h, b);
              ASSERT_EQ(target[l][dst], source[l][Where(c_, p, from[i], r, h, b)]);
              written[dst] = true;
            }
          }
        }
      }
    }
    for (std::int64_t i = 0; i < bytes_; ++i) {
      if (!written[i]) {
        ASSERT_EQ(target[l][i], std::byte{0}) << "byte " << i << " of layer " << l;
      }
    }
  }
}

TEST_P(HostKvCopyTest, ScatterLeavesTheSkippedBlocksAndAPartialChunkCopiesOnlyItsTokens) {
  auto source = Caches(true);
  auto target = Caches(false);
  const std::vector<std::int32_t> ids = {0, 1, 2, 3};
  std::vector<std::byte> object(layout_.ObjectBytes(c_.chunk));
  const std::int64_t tokens = c_.chunk - 1;  // the last token of the chunk is not part of it
  HostGather(Copy(ids, tokens, 0), Bases(source), object.data());
  HostScatter(Copy(ids, tokens, c_.block_size), Bases(target), object.data());
  const std::int64_t hb = c_.head_size * c_.element_size;
  for (std::int64_t r = 0; r < c_.block_size; ++r) {
    EXPECT_EQ(target[0][Where(c_, 0, 0, r, 0, 0)], std::byte{0}) << "skipped block written";
    EXPECT_EQ(target[0][Where(c_, 0, 1, r, 0, hb - 1)], source[0][Where(c_, 0, 1, r, 0, hb - 1)]);
  }
  EXPECT_EQ(target[0][Where(c_, 0, 3, c_.block_size - 1, 0, 0)], std::byte{0}) << "past the tokens";
  EXPECT_EQ(target[0][Where(c_, 0, 3, c_.block_size - 2, 0, 0)],
            source[0][Where(c_, 0, 3, c_.block_size - 2, 0, 0)]);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HostKvCopyTest,
                         testing::Values(Case{KvFormat::kNhd, 8, 4, 3, 8, 2, 3, 16},
                                         Case{KvFormat::kHnd, 8, 4, 3, 8, 2, 3, 16},
                                         Case{KvFormat::kMla, 8, 4, 1, 24, 2, 2, 16},
                                         Case{KvFormat::kNhd, 8, 2, 2, 4, 4, 2, 8}),
                         [](const testing::TestParamInfo<Case>& param) {
                           return std::string(KvFormatName(param.param.format)) + "_" +
                                  std::to_string(param.index);
                         });

}  // namespace
}  // namespace lmcache::gpu
