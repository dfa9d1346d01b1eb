// The directory feed's wire forms: a page and a listing read back as they
// were written; what a peer could send wrong (a chunks bin of a partial id,
// an unknown change, records out of order, a cursor not the last record's,
// a missing field, more than the limits, trailing bytes) is refused.
#include "fleet/chunk_feed_codec.h"

#include <gtest/gtest.h>

#include <string>

#include "common/msgpack_codec.h"

namespace lmcache::fleet {
namespace {

ChunkPage APage() {
  ChunkPage page;
  page.incarnation = 9;
  page.next_cursor = 12;
  page.records = {{11, DirectoryChange::kStored, {1, 2, 3}}, {12, DirectoryChange::kRemoved, {2}}};
  return page;
}

// A page map with `records` (already encoded) and the other fields as given.
std::string PageWith(std::uint64_t next_cursor, const std::string& records, std::uint32_t count) {
  msgpk::Encoder out;
  out.Map(4);
  out.Str("incarnation").Uint(9);
  out.Str("next_cursor").Uint(next_cursor);
  out.Str("lost").Bool(false);
  out.Str("records").Array(count);
  return out.Take() + records;
}

std::string Record(std::uint64_t seq, std::uint64_t change, std::string chunks) {
  msgpk::Encoder out;
  out.Array(3).Uint(seq).Uint(change).Bin(chunks);
  return out.Take();
}

TEST(ChunkFeedCodec, APageAndAListingReadBackAsWritten) {
  const ChunkPage page = APage();
  auto decoded = DecodeChunkPage(EncodeChunkPage(page));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(*decoded, page);

  ChunkListing listing{3, 40, 65536, {7, 8, 9}, "opaque-next"};
  auto back = DecodeChunkListing(EncodeChunkListing(listing));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, listing);
  listing.next.clear();
  EXPECT_EQ(*DecodeChunkListing(EncodeChunkListing(listing)), listing);
}

TEST(ChunkFeedCodec, WhatAPeerCouldSendWrongIsRefused) {
  const std::string id(8, '\1');
  EXPECT_TRUE(DecodeChunkPage(PageWith(1, Record(1, 0, id), 1)).ok());
  // A chunks bin that is not whole ids; an unknown change.
  EXPECT_FALSE(DecodeChunkPage(PageWith(1, Record(1, 0, id + "x"), 1)).ok());
  EXPECT_FALSE(DecodeChunkPage(PageWith(1, Record(1, 3, id), 1)).ok());
  // Records not numbered consecutively; a cursor that is not the last record's.
  EXPECT_FALSE(DecodeChunkPage(PageWith(3, Record(1, 0, id) + Record(3, 0, id), 2)).ok());
  EXPECT_FALSE(DecodeChunkPage(PageWith(5, Record(1, 0, id), 1)).ok());
  // More records, or chunks, than the limits.
  EXPECT_FALSE(
      DecodeChunkPage(PageWith(2, Record(1, 0, id) + Record(2, 0, id), 2), {.max_records = 1})
          .ok());
  EXPECT_FALSE(DecodeChunkPage(PageWith(1, Record(1, 0, id + id), 1), {.max_chunks = 1}).ok());
  // A field named twice (a second `records` would pass max_records).
  EXPECT_FALSE(DecodeChunkPage(PageWith(1, Record(1, 0, id), 1) + "\xa7records\x90").ok());
  {
    msgpk::Encoder twice;
    twice.Map(5).Str("incarnation").Uint(9).Str("next_cursor").Uint(0).Str("lost").Bool(false);
    twice.Str("records").Array(0).Str("records").Array(0);
    EXPECT_FALSE(DecodeChunkPage(twice.Take()).ok());
  }
  // Trailing bytes, a truncated frame, a missing field, incarnation 0.
  const std::string whole = EncodeChunkPage(APage());
  EXPECT_FALSE(DecodeChunkPage(whole + "\xc0").ok());
  EXPECT_FALSE(DecodeChunkPage(whole.substr(0, whole.size() - 3)).ok());
  msgpk::Encoder missing;
  missing.Map(1).Str("incarnation").Uint(1);
  EXPECT_FALSE(DecodeChunkPage(missing.Take()).ok());
  ChunkPage zero = APage();
  zero.incarnation = 0;
  EXPECT_FALSE(DecodeChunkPage(EncodeChunkPage(zero)).ok());

  ChunkListing listing{3, 40, 1, {7}, std::string(100, 'n')};
  EXPECT_FALSE(DecodeChunkListing(EncodeChunkListing(listing), {.max_next_bytes = 99}).ok());
  listing.next.clear();
  std::string partial = EncodeChunkListing(listing);
  EXPECT_FALSE(DecodeChunkListing(partial.substr(0, partial.size() - 2)).ok());
  EXPECT_FALSE(DecodeChunkListing(EncodeChunkPage(APage())).ok());  // not a listing
}

}  // namespace
}  // namespace lmcache::fleet
