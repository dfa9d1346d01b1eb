// DetectKvLayout, CheckChunkSize and CheckBlockIds: what registration accepts,
// what it refuses (with what it found), and block lists that fail closed.
#include "gpu/kv_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace lmcache::gpu {
namespace {

protocol::DeviceIpcWrapper Tensor(std::vector<std::int64_t> shape, std::uint32_t element_size = 2) {
  protocol::DeviceIpcWrapper w;
  w.dtype = "bfloat16";
  w.element_size = element_size;
  w.shape = std::move(shape);
  std::int64_t acc = 1;
  w.stride.resize(w.shape.size());
  for (std::size_t i = w.shape.size(); i-- > 0;) {
    w.stride[i] = acc;
    acc *= w.shape[i];
  }
  w.device_uuid = "GPU-0";
  return w;
}

void ExpectRefused(const Result<KvLayout>& r, std::string_view fragment) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
}

TEST(KvLayoutTest, NhdIsTheDefaultForFlashAttentionTensors) {
  const std::vector<protocol::DeviceIpcWrapper> layers(4, Tensor({2, 100, 16, 8, 128}));
  const auto r = DetectKvLayout(layers, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, KvFormat::kNhd);
  EXPECT_EQ(r->num_layers(), 4);
  const kv::PagedGeometry& g = r->geometry;
  EXPECT_EQ(g.planes, 2);
  EXPECT_EQ(g.num_blocks, 100);
  EXPECT_EQ(g.block_size, 16);
  EXPECT_EQ(g.heads, 8);
  EXPECT_EQ(g.head_bytes, 256);
  EXPECT_EQ(g.head_stride, 256);
  EXPECT_EQ(g.token_stride, 8 * 256);
  EXPECT_EQ(g.block_stride, 16 * 8 * 256);
  EXPECT_EQ(g.plane_stride, 100 * 16 * 8 * 256);
  EXPECT_EQ(r->ObjectBytes(256), 2u * 4 * 256 * 8 * 256);
}

TEST(KvLayoutTest, HndAndMlaFollowTheirShapes) {
  LayoutHints hnd;
  hnd.kv_layout = "HND";
  hnd.num_kv_heads = 8;
  hnd.tokens_per_block = 16;
  const std::vector<protocol::DeviceIpcWrapper> layers(2, Tensor({2, 100, 8, 16, 128}));
  const auto h = DetectKvLayout(layers, hnd);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->format, KvFormat::kHnd);
  EXPECT_EQ(h->geometry.heads, 8);
  EXPECT_EQ(h->geometry.block_size, 16);
  EXPECT_EQ(h->geometry.token_stride, 256);
  EXPECT_EQ(h->geometry.head_stride, 16 * 256);
  const std::vector<protocol::DeviceIpcWrapper> mla(3, Tensor({50, 64, 576}, 1));
  const auto m = DetectKvLayout(mla, {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->format, KvFormat::kMla);
  EXPECT_EQ(m->geometry.planes, 1);
  EXPECT_EQ(m->geometry.heads, 1);
  EXPECT_EQ(m->geometry.head_bytes, 576);
  EXPECT_EQ(m->ObjectBytes(256), 1u * 3 * 256 * 576);
}

TEST(KvLayoutTest, RefusesWhatItCannotServeSayingWhatItFound) {
  ExpectRefused(DetectKvLayout({}, {}), "no tensors");
  const std::vector<protocol::DeviceIpcWrapper> cross_layer(1, Tensor({100, 2, 16, 8, 128}));
  ExpectRefused(DetectKvLayout(cross_layer, {}), "unsupported KV cache shape [100, 2, 16, 8, 128]");
  const std::vector<protocol::DeviceIpcWrapper> nhd(1, Tensor({2, 100, 16, 8, 128}));
  LayoutHints odd;
  odd.kv_layout = "LBNHC";
  ExpectRefused(DetectKvLayout(nhd, odd), "kv_layout hint 'LBNHC'");
  LayoutHints heads;
  heads.num_kv_heads = 4;
  ExpectRefused(DetectKvLayout(nhd, heads), "num_kv_heads is 4 but the tensors have 8");
  std::vector<protocol::DeviceIpcWrapper> mixed(2, Tensor({2, 100, 16, 8, 128}));
  mixed[1] = Tensor({2, 100, 16, 4, 128});
  ExpectRefused(DetectKvLayout(mixed, {}), "layer 1");
  protocol::DeviceIpcWrapper strided = Tensor({2, 100, 16, 8, 128});
  strided.stride[4] = 2;
  ExpectRefused(DetectKvLayout(std::vector{strided}, {}), "not contiguous");
}

TEST(KvLayoutTest, ChunksAreWholeBlocksAndShortOrForeignBlockListsFailClosed) {
  const std::vector<protocol::DeviceIpcWrapper> layers(1, Tensor({2, 10, 16, 2, 64}));
  const auto layout = DetectKvLayout(layers, {});
  ASSERT_TRUE(layout.ok());
  EXPECT_TRUE(CheckChunkSize(*layout, 256).ok());
  EXPECT_EQ(CheckChunkSize(*layout, 100).code(), ErrorCode::kInvalidArgument);
  const std::vector<std::int32_t> ids = {0, 1, 2, 9};
  EXPECT_TRUE(CheckBlockIds(*layout, 64, ids).ok());
  EXPECT_TRUE(CheckBlockIds(*layout, 49, ids).ok());
  const Status short_list = CheckBlockIds(*layout, 65, ids);
  EXPECT_EQ(short_list.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(short_list.message().find("need 5 block ids"), std::string::npos) << short_list.ToString();
  const std::vector<std::int32_t> foreign = {0, 10};
  EXPECT_NE(CheckBlockIds(*layout, 32, foreign).message().find("block id 10 is outside"), std::string::npos);
  const std::vector<std::int32_t> negative = {-1};
  EXPECT_FALSE(CheckBlockIds(*layout, 16, negative).ok());
}

}  // namespace
}  // namespace lmcache::gpu
