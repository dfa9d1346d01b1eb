// The wire forms of KV events, byte for byte where a consumer decodes them:
// vLLM's KVEventBatch as vllm/distributed/kv_events.py writes it since its
// PR #42892 (tagged maps, defaulted fields left out, an array envelope of
// three; the bytes below follow msgspec's encoding rules: float64 ts,
// shortest ints, fixstr keys), and the reference's KVEventPollResult
// (custom_types.py: dataclasses, which msgspec writes as maps of every field).
#include "events/kv_event_codec.h"

#include <gtest/gtest.h>
#include <msgpack.hpp>

namespace lmcache::events {
namespace {

std::string Hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string Str(std::string_view s) {  // fixstr
  std::string out(1, static_cast<char>(0xa0 | s.size()));
  return out.append(s);
}

store::ChunkHash HashEndingIn(std::uint64_t low) {
  store::ChunkHash hash{};
  hash[0] = 0xaa;  // the high bytes never reach vLLM's int form
  for (int i = 0; i < 8; ++i) hash[31 - i] = static_cast<std::uint8_t>(low >> (8 * i));
  return hash;
}

TEST(KvEventCodec, VllmIntHashIsTheDigestsLastEightBytesBigEndian) {
  EXPECT_EQ(VllmIntHash(HashEndingIn(0xdeadbeef12345678ull)), 0xdeadbeef12345678ull);
}

TEST(KvEventCodec, VllmBatchOfARemovalAndAClearByteForByte) {
  KvEvent removed;
  removed.kind = KvEventKind::kRemoved;
  removed.medium = "CPU";
  removed.block_hashes.push_back(HashEndingIn(0xdeadbeef12345678ull));
  KvEvent cleared;
  cleared.kind = KvEventKind::kCleared;
  const KvEvent* events[] = {&removed, &cleared};
  const std::string got = EncodeVllmBatch(events, 1.5, {});
  std::string want = "\x93\xcb\x3f\xf8" + std::string(6, '\0') + "\x92";
  want += "\x83" + Str("type") + Str("BlockRemoved") + Str("block_hashes") +
          "\x91\xcf\xde\xad\xbe\xef\x12\x34\x56\x78" + Str("medium") + Str("CPU");
  want += "\x81" + Str("type") + "\xb0" + "AllBlocksCleared";
  want += "\xc0";  // data_parallel_rank: nil
  EXPECT_EQ(Hex(got), Hex(want));
}

TEST(KvEventCodec, VllmBlockStoredCarriesEveryRequiredField) {
  KvEvent stored;
  stored.kind = KvEventKind::kStored;
  stored.medium = "STORAGE";
  stored.block_hashes.push_back(HashEndingIn(2));
  stored.parent_block_hash = HashEndingIn(1);
  stored.tokens = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>{1, 2, 3, 4});
  stored.block_size = 4;
  const KvEvent* events[] = {&stored};
  VllmBatchOptions options;
  options.data_parallel_rank = 0;
  const std::string got = EncodeVllmBatch(events, 1.5, options);
  std::string want = "\x93\xcb\x3f\xf8" + std::string(6, '\0') + "\x91";
  want += "\x88" + Str("type") + Str("BlockStored") + Str("block_hashes") + "\x91\x02" +
          "\xb1" + "parent_block_hash" + "\x01" + Str("token_ids") + "\x94\x01\x02\x03\x04" +
          Str("block_size") + "\x04" + Str("lora_id") + "\xc0" + Str("medium") + Str("STORAGE") +
          Str("lora_name") + "\xc0";
  want += std::string(1, '\0');  // data_parallel_rank 0
  EXPECT_EQ(Hex(got), Hex(want));
}

TEST(KvEventCodec, VllmTenantGoesToExtraKeysAndBytesHashesAreWhole) {
  KvEvent stored;
  stored.kind = KvEventKind::kStored;
  stored.block_hashes.push_back(HashEndingIn(2));
  stored.tenant = "0123456789abcdef";
  const KvEvent* events[] = {&stored};
  VllmBatchOptions options;
  options.hashes = VllmHashFormat::kBytes;
  const std::string got = EncodeVllmBatch(events, 0, options);
  msgpack::object_handle handle = msgpack::unpack(got.data(), got.size());
  const msgpack::object& event = handle.get().via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(event.type, msgpack::type::MAP);
  bool saw_extra = false;
  for (std::uint32_t i = 0; i < event.via.map.size; ++i) {
    const std::string key = event.via.map.ptr[i].key.as<std::string>();
    const msgpack::object& value = event.via.map.ptr[i].val;
    if (key == "block_hashes") {
      EXPECT_EQ(value.via.array.ptr[0].type, msgpack::type::BIN);
      EXPECT_EQ(value.via.array.ptr[0].via.bin.size, 32u);
    }
    if (key == "extra_keys") {
      saw_extra = true;
      EXPECT_EQ(value.via.array.size, 1u);  // one entry per block
      EXPECT_EQ(value.via.array.ptr[0].via.array.ptr[0].as<std::string>(), stored.tenant);
    }
  }
  EXPECT_TRUE(saw_extra);
}

TEST(KvEventCodec, ReferencePageIsAMapOfEveryFieldInDeclarationOrder) {
  KvEventPage page;
  page.enabled = true;
  page.incarnation = 7;
  page.next_cursor = 3;
  KvEvent& event = page.events.emplace_back();
  event.seq = 3;
  event.kind = KvEventKind::kStored;
  event.medium = "CPU";
  event.model_name = "m";
  event.block_hashes.push_back(HashEndingIn(2));
  event.tokens = std::make_shared<const std::vector<std::uint32_t>>(std::vector<std::uint32_t>{5});
  event.block_size = 1;
  const std::string got = EncodeKvEventPage(page);
  msgpack::object_handle handle = msgpack::unpack(got.data(), got.size());
  const msgpack::object& map = handle.get();
  ASSERT_EQ(map.type, msgpack::type::MAP);
  const char* page_keys[] = {"enabled", "incarnation", "next_cursor", "lost", "events"};
  ASSERT_EQ(map.via.map.size, 5u);
  for (std::uint32_t i = 0; i < 5; ++i) EXPECT_EQ(map.via.map.ptr[i].key.as<std::string>(), page_keys[i]);
  const msgpack::object& record = map.via.map.ptr[4].val.via.array.ptr[0];
  // The reference's KVEventRecord, in its order; then block_size (its first
  // form had it) and ours, which msgspec skips.
  const char* record_keys[] = {"seq",       "kind",     "medium",     "model_name", "block_hashes",
                               "parent_block_hash", "token_ids", "block_size", "location", "tenant"};
  ASSERT_EQ(record.via.map.size, 10u);
  for (std::uint32_t i = 0; i < 10; ++i) {
    EXPECT_EQ(record.via.map.ptr[i].key.as<std::string>(), record_keys[i]);
  }
  EXPECT_EQ(record.via.map.ptr[1].val.as<std::string>(), "stored");
  EXPECT_EQ(record.via.map.ptr[4].val.via.array.ptr[0].type, msgpack::type::BIN);
  EXPECT_TRUE(record.via.map.ptr[5].val.is_nil());
}

}  // namespace
}  // namespace lmcache::events
