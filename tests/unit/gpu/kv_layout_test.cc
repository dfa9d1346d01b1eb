// DetectKvLayout against the tensors vLLM allocates, version by version
// (tests/fakes/vllm_kv_cache.h): the format each is read as, the byte
// strides of every named axis (checked against vLLM's own arithmetic), the
// object each chunk becomes, the layout namespace, KV groups, and what
// registration refuses with what it found.
#include "gpu/kv_layout.h"

#include <gtest/gtest.h>

#include <vector>

#include "fakes/vllm_kv_cache.h"

namespace lmcache::gpu {
namespace {

using testing::Cache;
using testing::Geometry;
using testing::Layout;

constexpr std::int64_t kChunk = 16;

protocol::MemHandle Handle() {
  protocol::MemHandle h{};
  h.fill(7);
  return h;
}

Result<KvLayout> Detect(const Cache& c, std::int64_t chunk = kChunk) {
  return DetectKvLayout(testing::Registration({&c}), chunk);
}

void ExpectRefused(const Result<KvLayout>& r, std::string_view fragment,
                   ErrorCode code = ErrorCode::kInvalidArgument) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
}

struct FormatCase {
  Layout layout;
  KvFormat format;
  std::int64_t heads;
};

class KvFormatTest : public ::testing::TestWithParam<FormatCase> {};

// Every named axis, read back from the geometry the server derived, lands
// where vLLM's memory order puts it.
TEST_P(KvFormatTest, EachVllmLayoutIsReadAsItsFormatWithVllmsOwnByteOffsets) {
  Geometry g;
  g.heads = GetParam().heads;
  g.pad = 3;  // dim-0 padding: the outermost axis strides past its contents
  g.storage_byte_offset = 4096;
  const Cache c = testing::MakeCache(GetParam().layout, g, Handle());
  const auto r = Detect(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->groups.size(), 1u);
  const KvGroupLayout& group = r->groups[0];
  EXPECT_EQ(group.format, GetParam().format) << KvFormatName(group.format);
  const kv::PagedGeometry& p = group.paged;
  EXPECT_EQ(p.num_blocks, g.blocks);
  EXPECT_EQ(p.block_size, g.block_size);
  const bool mla = testing::Mla(GetParam().layout);
  EXPECT_EQ(p.heads, mla ? 1 : g.heads);
  ASSERT_EQ(group.num_layers(), g.layers);
  const std::int64_t head_bytes = g.head_size * g.element_size;
  for (std::int64_t l = 0; l < g.layers; ++l) {
    const std::uint64_t base = group.layers[l].first_byte;
    for (std::int64_t kv = 0; kv < (mla ? 1 : 2); ++kv) {
      for (const std::int64_t b : {std::int64_t{0}, g.blocks - 1}) {
        for (std::int64_t t = 0; t < g.block_size; ++t) {
          for (std::int64_t h = 0; h < p.heads; ++h) {
            for (const std::int64_t byte : {std::int64_t{0}, head_bytes - 1}) {
              // Split formats: kv is the plane; packed: the second half of a head's content.
              const std::int64_t plane = p.planes == 2 ? kv : 0;
              const std::int64_t in_head = p.planes == 2 ? byte : kv * head_bytes + byte;
              const std::uint64_t server = base + kv::PagedByte(p, plane, b, t, h) + in_head;
              ASSERT_EQ(server, c.ElementByte(l, kv, b, t, h, byte))
                  << "layer " << l << " kv " << kv << " block " << b << " token " << t << " head " << h;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    VllmVersions, KvFormatTest,
    ::testing::Values(FormatCase{Layout::kFlashAttnNhd, KvFormat::kNhd, 2},
                      FormatCase{Layout::kFlashAttnHnd, KvFormat::kHnd, 2},
                      FormatCase{Layout::kBlocksFirstNhd, KvFormat::kBlocksFirstNhd, 2},
                      FormatCase{Layout::kBlocksFirstHnd, KvFormat::kBlocksFirstHnd, 2},
                      FormatCase{Layout::kPackedHnd, KvFormat::kPackedHnd, 2},
                      FormatCase{Layout::kPackedNhd, KvFormat::kPackedNhd, 2},
                      FormatCase{Layout::kSharedLbhnc, KvFormat::kPackedHnd, 2},
                      FormatCase{Layout::kSharedLbnhc, KvFormat::kPackedNhd, 2},
                      FormatCase{Layout::kSharedBlhnc, KvFormat::kPackedHnd, 2},
                      FormatCase{Layout::kMla, KvFormat::kMla, 1},
                      FormatCase{Layout::kSharedMla4d, KvFormat::kPackedHnd, 1},
                      FormatCase{Layout::kCrossLayer, KvFormat::kCrossLayer, 2},
                      // One KV head per rank (a 70B model at TP 8): PyTorch calls the
                      // logical view contiguous and the client sends it unpermuted.
                      FormatCase{Layout::kFlashAttnHnd, KvFormat::kNhd, 1},
                      FormatCase{Layout::kBlocksFirstHnd, KvFormat::kBlocksFirstNhd, 1},
                      FormatCase{Layout::kPackedNhd, KvFormat::kPackedHnd, 1},
                      FormatCase{Layout::kSharedLbnhc, KvFormat::kPackedHnd, 1}),
    [](const ::testing::TestParamInfo<FormatCase>& param) {
      return "format" + std::to_string(static_cast<int>(param.param.format)) + "_heads" +
             std::to_string(param.param.heads) + "_" + std::to_string(param.index);
    });

TEST(KvLayoutTest, TheObjectOfAChunkFollowsTheFormat) {
  Geometry g;
  g.layers = 3;
  g.heads = 4;
  g.head_size = 64;
  const auto split = Detect(testing::MakeCache(Layout::kFlashAttnNhd, g, Handle()), 256);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->groups[0].ObjectShape(), (std::vector<std::int64_t>{2, 3, 256, 256}));
  EXPECT_EQ(split->object_bytes, 2u * 3 * 256 * 256 * 2);
  EXPECT_EQ(split->object_namespace, 0u) << "the reference's [2, L, T, hidden] layout";
  const auto packed = Detect(testing::MakeCache(Layout::kSharedLbhnc, g, Handle()), 256);
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_EQ(packed->groups[0].ObjectShape(), (std::vector<std::int64_t>{1, 3, 256, 4 * 128}));
  EXPECT_EQ(packed->object_bytes, split->object_bytes) << "same bytes, another order";
  EXPECT_NE(packed->object_namespace, 0u) << "packed rows must not meet split readers";
  g.heads = 1;
  g.head_size = 576;
  g.dtype = "float8_e4m3fn";
  g.element_size = 1;
  const auto mla = Detect(testing::MakeCache(Layout::kMla, g, Handle()), 256);
  ASSERT_TRUE(mla.ok()) << mla.status().ToString();
  EXPECT_EQ(mla->groups[0].ObjectShape(), (std::vector<std::int64_t>{3, 256, 576}));
  EXPECT_EQ(mla->object_namespace, 0u) << "the engine-driven path's MLA layout";
  const auto mla4d = Detect(testing::MakeCache(Layout::kSharedMla4d, g, Handle()), 256);
  ASSERT_TRUE(mla4d.ok()) << mla4d.status().ToString();
  EXPECT_EQ(mla4d->object_bytes, mla->object_bytes);
  EXPECT_NE(mla4d->object_namespace, 0u);
}

TEST(KvLayoutTest, TheNamespaceIsAFunctionOfTheLayoutAlone) {
  Geometry g;
  const auto a = Detect(testing::MakeCache(Layout::kPackedHnd, g, Handle()));
  const auto b = Detect(testing::MakeCache(Layout::kSharedLbhnc, g, Handle()));
  g.dtype = "float16";
  const auto c = Detect(testing::MakeCache(Layout::kPackedHnd, g, Handle()));
  const auto d = Detect(testing::MakeCache(Layout::kPackedNhd, g, Handle()));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(a->object_namespace, b->object_namespace) << "one allocation or many: the same objects";
  EXPECT_NE(a->object_namespace, c->object_namespace) << "another dtype";
  EXPECT_NE(c->object_namespace, d->object_namespace) << "format 12 and 13 read rows alike but are named apart";
}

TEST(KvLayoutTest, SeveralKvGroupsEachKeepTheirPartOfTheObject) {
  Geometry full;
  full.layers = 2;
  Geometry window = full;
  window.layers = 3;
  window.heads = 1;
  window.block_size = 4;
  const Cache a = testing::MakeCache(Layout::kSharedLbhnc, full, Handle());
  const Cache b = testing::MakeCache(Layout::kSharedLbhnc, window, Handle());
  protocol::KvCacheRegistration r = testing::Registration({&a, &b});
  r.groups[1].sw_size_tokens = 8;  // a sliding window of 8 tokens, shorter than a 16-token chunk
  r.groups[1].tokens_per_block = 4;
  const auto layout = DetectKvLayout(r, kChunk);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->groups.size(), 2u);
  EXPECT_EQ(layout->groups[0].slots, kChunk);
  EXPECT_EQ(layout->groups[1].slots, 8) << "a window shorter than a chunk keeps its last window";
  EXPECT_EQ(layout->groups[1].object_offset, layout->groups[0].part_bytes());
  EXPECT_EQ(layout->object_bytes, layout->groups[0].part_bytes() + layout->groups[1].part_bytes());
  EXPECT_EQ(layout->groups[1].part_bytes(), 1u * 3 * 8 * 1 * 16 * 2);
  EXPECT_NE(layout->object_namespace, 0u);

  // Layers no group names are KV-sharing aliases: not copied.
  protocol::KvCacheRegistration aliases = testing::Registration({&a, &b});
  aliases.groups[1].layer_indices.pop_back();
  const auto skipped = DetectKvLayout(aliases, kChunk);
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_EQ(skipped->groups[1].num_layers(), 2);
}

TEST(KvLayoutTest, RefusesWhatItCannotServeSayingWhatItFoundAndWhatToChange) {
  Geometry g;
  const Cache nhd = testing::MakeCache(Layout::kFlashAttnNhd, g, Handle());
  protocol::KvCacheRegistration r = testing::Registration({&nhd});
  r.hints.kv_layout = "LHBNC";
  ExpectRefused(DetectKvLayout(r, kChunk), "unknown kv_layout hint 'LHBNC'");
  r = testing::Registration({&nhd});
  r.hints.num_kv_heads = 4;
  ExpectRefused(DetectKvLayout(r, kChunk), "num_kv_heads is 4 but the tensors have 2");
  r = testing::Registration({&nhd});
  r.layers[1].shape[3] = 1;
  ExpectRefused(DetectKvLayout(r, kChunk), "differs from layer 0");
  r = testing::Registration({&nhd});
  r.layers[0].stride[4] = 2;
  r.layers[1].stride[4] = 2;
  ExpectRefused(DetectKvLayout(r, kChunk), "not contiguous");
  ExpectRefused(DetectKvLayout(testing::Registration({&nhd}), 10), "not a multiple");
  r = testing::Registration({&nhd});
  r.layers[1].device_uuid = "GPU-other";
  ExpectRefused(DetectKvLayout(r, kChunk), "one registration is one GPU");

  Geometry dsa;
  dsa.dtype = "uint8";
  dsa.element_size = 1;
  dsa.head_size = 132;
  ExpectRefused(Detect(testing::MakeCache(Layout::kMla, dsa, Handle())), "DSA indexer",
                ErrorCode::kNotSupported);

  const Cache a = testing::MakeCache(Layout::kPackedHnd, g, Handle());
  const Cache b = testing::MakeCache(Layout::kPackedHnd, g, Handle());
  r = testing::Registration({&a, &b});
  r.groups[1].tokens_per_block = 16;  // vLLM's manager blocks of 16 over kernel blocks of 4
  ExpectRefused(DetectKvLayout(r, kChunk), "tokens_per_block 16 but its tensors hold blocks of 4");
  r = testing::Registration({&a, &b});
  r.groups[1].layer_indices[0] = 0;
  ExpectRefused(DetectKvLayout(r, kChunk), "layer 0 is in two engine groups");
  r = testing::Registration({&a, &b});
  r.groups[1].layer_indices[0] = 9;
  ExpectRefused(DetectKvLayout(r, kChunk), "names layer 9 of 4");
  r = testing::Registration({&a, &b});
  r.groups[1].sw_size_tokens = 6;
  ExpectRefused(DetectKvLayout(r, kChunk), "not whole blocks");
  r = testing::Registration({&a, &b});
  r.groups[0].sw_size_tokens = 0;
  ExpectRefused(DetectKvLayout(r, kChunk), "sw_size_tokens 0");
}

}  // namespace
}  // namespace lmcache::gpu
