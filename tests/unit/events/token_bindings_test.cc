// TokenBindings: a store's chunks bound to their tokens and parents, shared
// by every rank's store of the same chunk, bounded in bytes.
#include "events/token_bindings.h"

#include <gtest/gtest.h>

namespace lmcache::events {
namespace {

std::vector<store::ChunkHash> Hashes(int n) {
  std::vector<store::ChunkHash> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)][0] = static_cast<std::uint8_t>(i + 1);
  return out;
}

TEST(TokenBindings, BindsEachChunkWithItsTokensAndParent) {
  TokenBindings bindings(1u << 20);
  const auto hashes = Hashes(3);
  std::vector<std::uint32_t> tokens(12);
  for (std::uint32_t i = 0; i < 12; ++i) tokens[i] = 100 + i;
  bindings.Bind("m", hashes, 1, tokens, 4);  // chunks 1 and 2 only
  EXPECT_FALSE(bindings.Find("m", hashes[0]));
  auto second = bindings.Find("m", hashes[1]);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->parent, hashes[0]);
  EXPECT_EQ(*second->tokens, (std::vector<std::uint32_t>{104, 105, 106, 107}));
  EXPECT_FALSE(bindings.Find("other-model", hashes[1]));
  bindings.Bind("m", hashes, 0, tokens, 4);
  auto first = bindings.Find("m", hashes[0]);
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->parent);  // the first chunk of a prompt has none
}

TEST(TokenBindings, ForgetsTheLeastRecentlyBoundPastItsBytes) {
  const auto hashes = Hashes(100);
  std::vector<std::uint32_t> tokens(100 * 16, 7);
  TokenBindings bindings(20 * 1024);
  bindings.Bind("m", hashes, 0, tokens, 16);
  EXPECT_LE(bindings.bytes(), 20u * 1024);
  EXPECT_TRUE(bindings.Find("m", hashes[99]));
  EXPECT_FALSE(bindings.Find("m", hashes[0]));
  TokenBindings none(0);
  none.Bind("m", hashes, 0, tokens, 16);
  EXPECT_FALSE(none.Find("m", hashes[0]));
}

}  // namespace
}  // namespace lmcache::events
