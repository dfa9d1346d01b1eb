// CheckBlockIds, PlanStore and PlanRetrieve: block lists fail closed per KV
// group; a store leaves out chunks that would read the engine's null block;
// a retrieve scatters a sliding-window group only where its window reaches,
// never into skipped blocks or the null block.
#include "gpu/transfer_plan.h"

#include <gtest/gtest.h>

#include "fakes/vllm_kv_cache.h"

namespace lmcache::gpu {
namespace {

using testing::Layout;

constexpr std::int64_t kChunk = 16;  // 4 blocks of 4 tokens

// Two groups as a hybrid model registers them: full attention, and a
// sliding window (`window` tokens) over blocks of 4.
KvLayout TwoGroups(std::int64_t window) {
  testing::Geometry g;
  g.blocks = 32;
  static const protocol::MemHandle handle{};
  const testing::Cache full = testing::MakeCache(Layout::kSharedLbhnc, g, handle);
  const testing::Cache sliding = testing::MakeCache(Layout::kSharedLbhnc, g, handle);
  protocol::KvCacheRegistration r = testing::Registration({&full, &sliding});
  r.groups[1].sw_size_tokens = window;
  auto layout = DetectKvLayout(r, kChunk);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  return *layout;
}

std::vector<std::int32_t> Range(std::int32_t first, std::int32_t count) {
  std::vector<std::int32_t> ids;
  for (std::int32_t i = 0; i < count; ++i) ids.push_back(first + i);
  return ids;
}

TEST(TransferPlanTest, BlockListsCoverEveryChunkOfEveryGroupOrFailClosed) {
  const KvLayout layout = TwoGroups(-1);
  EXPECT_TRUE(CheckBlockIds(layout, 2, {Range(1, 8), Range(9, 8)}).ok());
  const Status one_list = CheckBlockIds(layout, 2, {Range(1, 8)});
  EXPECT_NE(one_list.message().find("1 lists for the 2 KV groups"), std::string::npos) << one_list.ToString();
  const Status short_list = CheckBlockIds(layout, 2, {Range(1, 8), Range(9, 7)});
  EXPECT_NE(short_list.message().find("need 8 block ids of 4 tokens of KV group 1; got 7"), std::string::npos)
      << short_list.ToString();
  const Status foreign = CheckBlockIds(layout, 2, {Range(1, 8), Range(30, 8)});
  EXPECT_NE(foreign.message().find("block id 32 of KV group 1 is outside the cache's 32 blocks"), std::string::npos)
      << foreign.ToString();
  // vLLM's null block (0) is a legal id: its chunks are planned around.
  EXPECT_TRUE(CheckBlockIds(layout, 2, {{0, 0, 0, 0, 5, 6, 7, 8}, Range(9, 8)}).ok());
  const Status negative = CheckBlockIds(layout, 1, {{-1, 1, 2, 3}, Range(9, 4)});
  EXPECT_FALSE(negative.ok());
}

TEST(TransferPlanTest, AStoreLeavesOutChunksThatWouldReadTheNullBlock) {
  const KvLayout layout = TwoGroups(-1);
  // Chunk 0 of group 1 is vLLM's null block (freed, out of window): nothing valid to store.
  const auto plans = PlanStore(layout, {Range(1, 12), {0, 0, 0, 0, 13, 14, 15, 16, 17, 18, 19, 20}}, 3);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[0].chunk, 1u);
  EXPECT_EQ(plans[1].chunk, 2u);
  ASSERT_EQ(plans[0].groups.size(), 2u);
  EXPECT_EQ(plans[0].groups[0].block_ids, Range(5, 4));
  EXPECT_EQ(plans[0].groups[1].block_ids, Range(13, 4));
}

TEST(TransferPlanTest, AWindowShorterThanAChunkKeepsTheLastBlocksOfEachChunk) {
  const KvLayout layout = TwoGroups(8);  // two blocks of each 4-block chunk
  ASSERT_EQ(layout.groups[1].slots, 8);
  const auto stored = PlanStore(layout, {Range(1, 8), Range(9, 8)}, 2);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[1].groups[1].block_ids, (std::vector<std::int32_t>{15, 16}));
  // Out-of-window blocks may be null on store: only the kept ones matter.
  EXPECT_EQ(PlanStore(layout, {Range(1, 8), {0, 0, 11, 12, 0, 0, 15, 16}}, 2).size(), 2u);
  // Retrieve: only the last chunk's window is needed to continue after the range.
  const auto retrieved = PlanRetrieve(layout, {Range(1, 8), Range(9, 8)}, 2, 0);
  ASSERT_EQ(retrieved.size(), 2u);
  ASSERT_EQ(retrieved[0].groups.size(), 1u) << "group 1's window does not reach chunk 0";
  EXPECT_EQ(retrieved[0].groups[0].group, 0u);
  ASSERT_EQ(retrieved[1].groups.size(), 2u);
  EXPECT_EQ(retrieved[1].groups[1].block_ids, (std::vector<std::int32_t>{15, 16}));
}

TEST(TransferPlanTest, ARetrieveSkipsWholeBlocksPerGroupAndNeverWritesTheNullBlock) {
  const KvLayout layout = TwoGroups(2 * kChunk);  // a window of two chunks
  const auto plans = PlanRetrieve(layout, {Range(1, 12), {0, 0, 0, 0, 13, 0, 15, 16, 17, 18, 19, 20}}, 3,
                                  kChunk + 6);  // one chunk and a block and a half
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_TRUE(plans[0].groups.empty()) << "skipped by skip_first_n_tokens, and outside the window";
  ASSERT_EQ(plans[1].groups.size(), 2u);
  EXPECT_EQ(plans[1].groups[0].skip_tokens, 4) << "floor(6 / 4) whole blocks";
  EXPECT_EQ(plans[1].groups[1].block_ids, (std::vector<std::int32_t>{13, -1, 15, 16}))
      << "the null block is left alone";
  ASSERT_EQ(plans[2].groups.size(), 2u);
  EXPECT_EQ(plans[2].groups[0].skip_tokens, 0);
}

}  // namespace
}  // namespace lmcache::gpu
