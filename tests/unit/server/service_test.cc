// The service in-process: every operation, lock balance after each flow,
// failures, unregister and the reaper.
#include "server/service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "fakes/wait_until.h"
#include "fakes/fake_prefetcher.h"
#include "fakes/prefault_gate.h"
#include "fakes/service_harness.h"
#include "transport/router_loop.h"

namespace lmcache::server {
namespace {

using testing::Field;
using testing::IntFrame;
using testing::KeyArgs;
using testing::KeyFrame;
using testing::RegisterFrame;
using testing::StrFrame;
using testing::Tokens;

constexpr std::uint64_t kObject = 2 * 2 * 256 * 64 * 2;  // [2, 2, 256, 64] bfloat16

using testing::WaitUntil;

struct Slot {
  std::uint64_t offset;
  std::uint64_t length;
};

std::vector<Slot> SlotsOf(const msgpack::object& context) {
  auto map = std::move(msgpk::MapReader::Make(context, "context")).value();
  const msgpack::object* slots = map.Field("slots");
  std::vector<Slot> out;
  for (std::uint32_t i = 0; slots != nullptr && i < slots->via.array.size; ++i) {
    auto slot = std::move(msgpk::MapReader::Make(slots->via.array.ptr[i], "slot")).value();
    out.push_back({slot.Field("offset")->via.u64, slot.Field("length")->via.u64});
  }
  return out;
}

class ServiceTest : public ::testing::Test {
 protected:
  explicit ServiceTest(std::uint64_t pool = 64ull << 20, bool on_demand = true)
      : h_(pool, ServiceConfig{}, on_demand) {}

  void Register(std::int64_t instance, std::int64_t world_size = 1) {
    auto reply = h_.Ok("register_kv_cache_engine_driven_context",
                       {RegisterFrame(instance, "model", world_size)});
    EXPECT_EQ(Field(reply.get(), "object_bytes").via.u64, kObject);
  }
  // prepare_store + fill each slot with a byte derived from its chunk + commit.
  std::vector<Slot> Store(std::int64_t instance, const KeyArgs& key, bool commit = true) {
    auto prepared = h_.Ok("prepare_store", {KeyFrame(key), IntFrame(instance)});
    std::vector<Slot> slots = SlotsOf(Field(prepared.get(), "context"));
    const msgpack::object& indices = Field(Field(prepared.get(), "context"), "chunk_indices");
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto chunk =
          key.start / 256 + static_cast<std::int64_t>(indices.via.array.ptr[i].via.u64);
      std::memset(h_.pool() + slots[i].offset, Pattern(key, chunk), slots[i].length);
    }
    if (commit) {
      auto done =
          h_.Ok("commit_store", {KeyFrame(key), IntFrame(instance), msgpk::Encoder().Bin("").Take()});
      EXPECT_TRUE(done.get().via.boolean);
    }
    return slots;
  }
  static int Pattern(const KeyArgs& key, std::int64_t chunk) {
    return static_cast<int>((key.tokens[0] + static_cast<std::uint32_t>(chunk) * 7) & 0xff);
  }
  std::uint64_t Lookup(const KeyArgs& key) {
    KeyArgs scheduler = key;
    scheduler.worker_id.reset();
    auto ack = h_.Ok("lookup", {KeyFrame(scheduler), IntFrame(1)});
    EXPECT_EQ(ack.get().type, msgpack::type::NIL);
    return h_.Ok("query_prefetch_status", {StrFrame(key.request_id)}).get().via.u64;
  }
  // prepare_retrieve + verify bytes + commit_retrieve.
  void Retrieve(std::int64_t instance, const KeyArgs& key) {
    auto prepared = h_.Ok("prepare_retrieve", {KeyFrame(key), IntFrame(instance)});
    ASSERT_TRUE(Field(prepared.get(), "success").via.boolean);
    const std::vector<Slot> slots = SlotsOf(Field(prepared.get(), "context"));
    ASSERT_EQ(static_cast<std::int64_t>(slots.size()), (key.end - key.start) / 256);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const auto expected =
          static_cast<std::byte>(Pattern(key, key.start / 256 + static_cast<std::int64_t>(i)));
      const std::byte* p = h_.pool() + slots[i].offset;
      ASSERT_EQ(slots[i].length, kObject);
      ASSERT_EQ(p[0], expected);
      ASSERT_EQ(p[kObject - 1], expected);
    }
    EXPECT_TRUE(h_.Ok("commit_retrieve", {KeyFrame(key), IntFrame(instance)}).get().via.boolean);
  }
  store::TableStats Table() { return h_.service().table().Stats(); }

  testing::ServiceHarness h_;
};

KeyArgs Key(std::size_t tokens, std::int64_t end_chunks, std::uint32_t seed = 1,
            std::string request = "req") {
  KeyArgs key;
  key.tokens = Tokens(tokens, seed);
  key.end = end_chunks * 256;
  key.request_id = std::move(request);
  return key;
}

TEST_F(ServiceTest, RegisterReturnsPoolAndIsIdempotent) {
  auto first = h_.Ok("register_kv_cache_engine_driven_context", {RegisterFrame(1)});
  EXPECT_EQ(std::string(Field(first.get(), "shm_name").via.str.ptr,
                        Field(first.get(), "shm_name").via.str.size),
            h_.l1().segment().name());
  EXPECT_EQ(Field(first.get(), "pool_size").via.u64, h_.l1().segment().size());
  EXPECT_EQ(Field(first.get(), "error").type, msgpack::type::NIL);
  auto again = h_.Ok("register_kv_cache_engine_driven_context", {RegisterFrame(1)});
  EXPECT_EQ(Field(again.get(), "boot_id").as<std::string>(), h_.service().boot_id());
  EXPECT_EQ(h_.service().instances().size(), 1u);
}

TEST_F(ServiceTest, LayoutMismatchIsRefused) {
  Register(1);
  auto other_layers = h_.Call("register_kv_cache_engine_driven_context",
                              {RegisterFrame(1, "model", 1, /*layers=*/4)});
  EXPECT_EQ(other_layers.status.code(), ErrorCode::kLayoutMismatch);
  auto second_instance = h_.Call("register_kv_cache_engine_driven_context",
                                 {RegisterFrame(2, "model", 1, 2, /*hidden=*/128)});
  EXPECT_EQ(second_instance.status.code(), ErrorCode::kLayoutMismatch);
  EXPECT_NE(second_instance.status.message().find("already served"), std::string::npos);
  EXPECT_TRUE(h_.Call("register_kv_cache_engine_driven_context",
                      {RegisterFrame(3, "model", 1, 2, 64, "bfloat16")})
                  .status.ok());
  EXPECT_EQ(h_.Call("register_kv_cache_engine_driven_context",
                    {RegisterFrame(4, "model", 1, 2, 64, "complex64")})
                .status.code(),
            ErrorCode::kInvalidArgument);
}

TEST_F(ServiceTest, StoreLookupRetrieveBalancesLocks) {
  Register(1);
  const KeyArgs key = Key(800, 3);  // 3 full chunks and a partial tail
  EXPECT_EQ(Store(1, key).size(), 3u);
  EXPECT_EQ(Table().resident_objects, 3u);
  EXPECT_EQ(Lookup(key), 3u);
  EXPECT_EQ(Table().locked_objects, 3u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 0u);  // consumed
  Retrieve(1, key);
  EXPECT_EQ(Table().locked_objects, 0u);
  EXPECT_EQ(Table().staging_objects, 0u);
}

TEST_F(ServiceTest, SecondStoreOfSameKeyIsAlreadyCached) {
  Register(1);
  Register(2);
  const KeyArgs key = Key(512, 2);
  Store(1, key);
  EXPECT_TRUE(Store(2, key).empty());
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), 2 * kObject);
}

TEST_F(ServiceTest, LookupIgnoresRangeAndCountsLeadingChunks) {
  Register(1);
  Store(1, Key(1024, 2, 5, "a"));  // chunks 0, 1 of prompt 5
  KeyArgs longer = Key(1024, 0, 5, "b");
  EXPECT_EQ(Lookup(longer), 2u);  // the whole prompt is looked up, 2 of 4 chunks hit
  KeyArgs other = Key(1024, 0, 6, "c");
  EXPECT_EQ(Lookup(other), 0u);
  KeyArgs salted = Key(1024, 0, 5, "d");
  salted.salt = "tenant-b";
  EXPECT_EQ(Lookup(salted), 0u);
}

TEST_F(ServiceTest, MultipleReadersEachReleaseOneLock) {
  for (int i = 1; i <= 3; ++i) Register(i);
  KeyArgs key = Key(512, 2);
  Store(1, key);
  key.readers = 3;
  EXPECT_EQ(Lookup(key), 2u);
  Retrieve(1, key);
  Retrieve(2, key);
  EXPECT_EQ(Table().locked_objects, 2u);
  Retrieve(3, key);
  EXPECT_EQ(Table().locked_objects, 0u);
}

TEST_F(ServiceTest, FreeLookupLocksReleasesUnusedRangeOnce) {
  Register(1);
  KeyArgs key = Key(1024, 4);
  Store(1, key);
  key.readers = 2;
  EXPECT_EQ(Lookup(key), 4u);
  KeyArgs tail = key;
  tail.worker_id.reset();
  tail.start = 512;
  tail.end = 1024;
  h_.Ok("free_lookup_locks", {KeyFrame(tail), IntFrame(1)});
  h_.Ok("free_lookup_locks", {KeyFrame(tail), IntFrame(1)});  // idempotent
  EXPECT_EQ(Table().locked_objects, 2u);
  KeyArgs head = key;
  head.end = 512;
  head.readers = 2;
  Retrieve(1, head);
  EXPECT_EQ(Table().locked_objects, 2u);  // one reader of two done
  Retrieve(1, head);
  EXPECT_EQ(Table().locked_objects, 0u);
}

TEST_F(ServiceTest, RetrieveOfMissingChunkFailsAndLeavesNoLock) {
  Register(1);
  KeyArgs stored = Key(1024, 2);
  Store(1, stored);
  EXPECT_EQ(Lookup(stored), 2u);
  KeyArgs wider = stored;
  wider.end = 768;  // chunk 2 was never stored
  auto reply = h_.Call("prepare_retrieve", {KeyFrame(wider), IntFrame(1)});
  EXPECT_EQ(reply.status.code(), ErrorCode::kNotFound);
  EXPECT_EQ(Table().locked_objects, 0u);
  EXPECT_EQ(h_.service().instances().Counts().pending_reads, 0u);
}

TEST_F(ServiceTest, RetrieveAfterReadLeaseExpiryStillWorksAndRelocks) {
  Register(1);
  KeyArgs key = Key(512, 2);
  Store(1, key);
  EXPECT_EQ(Lookup(key), 2u);
  h_.clock().Advance(h_.service().table().config().read_ttl_ms + 1);
  EXPECT_EQ(Table().locked_objects, 0u);  // evictable now, but still resident
  auto prepared = h_.Ok("prepare_retrieve", {KeyFrame(key), IntFrame(1)});
  ASSERT_TRUE(Field(prepared.get(), "success").via.boolean);
  EXPECT_EQ(Table().locked_objects, 2u);  // pinned for the copy
  h_.Ok("commit_retrieve", {KeyFrame(key), IntFrame(1)});
  EXPECT_EQ(Table().locked_objects, 0u);
}

TEST_F(ServiceTest, CommitStoreErrors) {
  Register(1);
  const KeyArgs key = Key(512, 2);
  auto none = h_.Call("commit_store", {KeyFrame(key), IntFrame(1), msgpk::Encoder().Bin("").Take()});
  EXPECT_EQ(none.status.code(), ErrorCode::kNotFound);
  Store(1, key, /*commit=*/false);
  auto inline_data =
      h_.Call("commit_store", {KeyFrame(key), IntFrame(1), msgpk::Encoder().Bin("x").Take()});
  EXPECT_EQ(inline_data.status.code(), ErrorCode::kNotSupported);
  h_.clock().Advance(h_.service().table().config().write_ttl_ms + 1);
  auto expired =
      h_.Call("commit_store", {KeyFrame(key), IntFrame(1), msgpk::Encoder().Bin("").Take()});
  EXPECT_EQ(expired.status.code(), ErrorCode::kLeaseExpired);
  EXPECT_EQ(Table().resident_objects, 0u);
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), 0u);
}

// Issue 22, request tags (the reference's lmcache.tag.* entries of a key's
// request_configs): a tagged and an untagged store of the same tokens are
// two objects; a lookup finds only the ones of its own tag set.
TEST_F(ServiceTest, TaggedAndUntaggedStoresOfTheSameTokensNeverShareAnObject) {
  Register(1);
  const KeyArgs untagged = Key(512, 2, 1, "plain");
  KeyArgs tagged = Key(512, 2, 1, "tagged");
  tagged.tags = {{"tenant", "a"}, {"application_version", "v2"}};
  Store(1, untagged);
  EXPECT_EQ(Lookup(tagged), 0u) << "a tagged lookup hit untagged objects";
  EXPECT_EQ(Store(1, tagged).size(), 2u) << "the tagged store was taken as already cached";
  EXPECT_EQ(Table().resident_objects, 4u);
  EXPECT_EQ(Lookup(untagged), 2u);
  EXPECT_EQ(Lookup(tagged), 2u);
  Retrieve(1, tagged);
  KeyArgs other_value = tagged;
  other_value.request_id = "other";
  other_value.tags["tenant"] = "b";
  EXPECT_EQ(Lookup(other_value), 0u);
  KeyArgs bad = tagged;
  bad.tags = {{"tenant", "a/b"}};
  EXPECT_EQ(h_.Call("prepare_store", {KeyFrame(bad), IntFrame(1)}).status.code(),
            ErrorCode::kInvalidKey);
}

// abort_store, as the newest reference client sends it (by name, [key,
// instance_id], a bool back; LMCache adapter_connector/shm.py's abort_store
// after a failed worker-side copy): the prepared slots are given back
// without admitting a byte, and the key can be stored again at once.
TEST_F(ServiceTest, AbortStoreGivesBackThePreparedSlotsAndAdmitsNothing) {
  Register(1);
  const KeyArgs key = Key(512, 2);
  Store(1, key, /*commit=*/false);
  EXPECT_EQ(Table().staging_objects, 2u);
  auto aborted = h_.Ok("abort_store", {KeyFrame(key), IntFrame(1)});
  EXPECT_TRUE(aborted.get().via.boolean);
  EXPECT_EQ(Table().staging_objects, 0u);
  EXPECT_EQ(Table().resident_objects, 0u);
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), 0u);
  EXPECT_EQ(h_.service().instances().Counts().pending_writes, 0u);
  EXPECT_EQ(Lookup(key), 0u);
  // Its commit finds nothing pending; a second abort is still True.
  EXPECT_EQ(h_.Call("commit_store", {KeyFrame(key), IntFrame(1), msgpk::Encoder().Bin("").Take()})
                .status.code(),
            ErrorCode::kNotFound);
  EXPECT_TRUE(h_.Ok("abort_store", {KeyFrame(key), IntFrame(1)}).get().via.boolean);
  // An instance that never registered: refused, with the declared bool.
  const server::Reply stranger = h_.Call("abort_store", {KeyFrame(key), IntFrame(99)});
  EXPECT_FALSE(stranger.status.ok());
  EXPECT_EQ(stranger.value, msgpk::Encoder().Bool(false).Take());
  EXPECT_EQ(Store(1, key).size(), 2u);  // stored afresh
  EXPECT_EQ(Table().resident_objects, 2u);
}

// Issue 20, "worker stalls between prepare and commit": its write lease
// expires and is reclaimed while it is slow, not gone; it then writes its
// slots late. Another worker's object stored meanwhile must not share a byte
// with those slots. The stalled slots are reused only after the worker goes.
TEST_F(ServiceTest, AStalledWorkersLateWriteNeverLandsInAnotherWorkersObject) {
  for (const auto& [connection, instance] : {std::pair{"stalled", 1}, std::pair{"healthy", 2}}) {
    ASSERT_TRUE(h_.CallAs(connection, "register_kv_cache_engine_driven_context", {RegisterFrame(instance)})
                    .status.ok());
  }
  auto prepare = [this](const char* connection, const KeyArgs& key, std::int64_t instance) {
    const server::Reply reply = h_.CallAs(connection, "prepare_store", {KeyFrame(key), IntFrame(instance)});
    EXPECT_TRUE(reply.status.ok()) << reply.status.ToString();
    return SlotsOf(Field(msgpack::unpack(reply.value.data(), reply.value.size()).get(), "context"));
  };
  const KeyArgs late_key = Key(8 * 256, 8, 1, "late");
  const std::vector<Slot> stalled = prepare("stalled", late_key, 1);
  ASSERT_EQ(stalled.size(), 8u);
  h_.clock().Advance(h_.service().table().config().write_ttl_ms + 1);
  h_.service().table().ReclaimExpired();
  // The healthy worker stores 8 chunks now.
  const KeyArgs key = Key(8 * 256, 8, 2, "fresh");
  const std::vector<Slot> slots = prepare("healthy", key, 2);
  ASSERT_EQ(slots.size(), 8u);
  for (const Slot& a : slots) {
    for (const Slot& b : stalled) {
      ASSERT_TRUE(a.offset + a.length <= b.offset || b.offset + b.length <= a.offset)
          << "the healthy worker was given memory the stalled one may still write";
    }
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    std::memset(h_.pool() + slots[i].offset, Pattern(key, static_cast<std::int64_t>(i)), slots[i].length);
  }
  ASSERT_TRUE(h_.CallAs("healthy", "commit_store", {KeyFrame(key), IntFrame(2), msgpk::Encoder().Bin("").Take()})
                  .status.ok());
  // The stalled worker wakes up, writes its slots and commits: refused.
  for (const Slot& slot : stalled) std::memset(h_.pool() + slot.offset, 0xEE, slot.length);
  EXPECT_EQ(h_.CallAs("stalled", "commit_store", {KeyFrame(late_key), IntFrame(1), msgpk::Encoder().Bin("").Take()})
                .status.code(),
            ErrorCode::kLeaseExpired);
  EXPECT_EQ(Table().quarantined_objects, 8u);
  KeyArgs reader = key;
  ASSERT_EQ(Lookup(reader), 8u);
  ASSERT_TRUE(h_.CallAs("healthy", "prepare_retrieve", {KeyFrame(key), IntFrame(2)}).status.ok());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto expected = static_cast<std::byte>(Pattern(key, static_cast<std::int64_t>(i)));
    ASSERT_EQ(h_.pool()[slots[i].offset], expected) << "chunk " << i << " was overwritten";
    ASSERT_EQ(h_.pool()[slots[i].offset + slots[i].length - 1], expected) << "chunk " << i;
  }
  h_.CallAs("healthy", "commit_retrieve", {KeyFrame(key), IntFrame(2)});
  // The stalled worker goes: its quarantined memory is free again.
  h_.service().OnClosing("stalled");
  h_.service().OnDisconnect("stalled");
  EXPECT_EQ(Table().quarantined_objects, 0u);
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), 8 * kObject);
}

TEST_F(ServiceTest, TransfersNeedRegistrationAndMatchingKey) {
  const KeyArgs key = Key(512, 2);
  EXPECT_EQ(h_.Call("prepare_store", {KeyFrame(key), IntFrame(9)}).status.code(),
            ErrorCode::kNotRegistered);
  Register(1);
  KeyArgs other_model = key;
  other_model.model = "other";
  EXPECT_EQ(h_.Call("prepare_store", {KeyFrame(other_model), IntFrame(1)}).status.code(),
            ErrorCode::kLayoutMismatch);
  KeyArgs misaligned = key;
  misaligned.end = 300;
  EXPECT_EQ(h_.Call("prepare_store", {KeyFrame(misaligned), IntFrame(1)}).status.code(),
            ErrorCode::kInvalidArgument);
  KeyArgs beyond = key;
  beyond.end = 768;
  EXPECT_EQ(h_.Call("prepare_store", {KeyFrame(beyond), IntFrame(1)}).status.code(),
            ErrorCode::kInvalidArgument);
  KeyArgs no_worker = key;
  no_worker.worker_id.reset();
  EXPECT_EQ(h_.Call("prepare_store", {KeyFrame(no_worker), IntFrame(1)}).status.code(),
            ErrorCode::kInvalidArgument);
  KeyArgs bad_rank = key;
  bad_rank.worker_id = 3;
  EXPECT_FALSE(h_.Call("prepare_store", {KeyFrame(bad_rank), IntFrame(1)}).status.ok());
}

TEST_F(ServiceTest, UnregisterReleasesPendingWritesAndReads) {
  Register(1);
  KeyArgs stored = Key(512, 2, 1, "s");
  Store(1, stored);
  EXPECT_EQ(Lookup(stored), 2u);
  h_.Ok("prepare_retrieve", {KeyFrame(stored), IntFrame(1)});  // reading, no commit
  Store(1, Key(768, 3, 2, "w"), /*commit=*/false);             // writing, no commit
  EXPECT_EQ(Table().staging_objects, 3u);
  EXPECT_EQ(Table().locked_objects, 5u);
  h_.Ok("unregister_kv_cache_engine_driven_context", {IntFrame(1)});
  EXPECT_EQ(Table().staging_objects, 0u);
  EXPECT_EQ(Table().locked_objects, 0u);
  EXPECT_EQ(Table().resident_objects, 2u);  // committed data stays
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), 2 * kObject);
  EXPECT_EQ(h_.Call("prepare_store", {KeyFrame(stored), IntFrame(1)}).status.code(),
            ErrorCode::kNotRegistered);
}

TEST_F(ServiceTest, ReaperReleasesSilentWorkers) {
  Register(1);  // will ping, then fall silent
  Register(2);  // registers and never speaks again
  h_.Ok("ping", {IntFrame(1)});
  Store(1, Key(512, 2), /*commit=*/false);
  EXPECT_EQ(Table().staging_objects, 2u);
  h_.clock().Advance(121'000);
  h_.service().RunMaintenance();
  EXPECT_EQ(h_.service().instances().size(), 1u);  // 1 reaped, 2 within its grace
  EXPECT_EQ(Table().staging_objects, 0u);
  h_.clock().Advance(3'600'000);
  h_.service().RunMaintenance();
  EXPECT_EQ(h_.service().instances().size(), 0u);
}

TEST_F(ServiceTest, AnyRequestCountsAsLiveness) {
  Register(1);
  for (int i = 0; i < 5; ++i) {
    h_.clock().Advance(100'000);
    h_.Ok("ping", {IntFrame(1)});
    h_.service().RunMaintenance();
  }
  EXPECT_EQ(h_.service().instances().size(), 1u);
}

TEST_F(ServiceTest, SessionsExpireAfterIdleTimeNotCreation) {
  Register(1);
  KeyArgs key = Key(512, 2);
  Store(1, key);
  KeyArgs scheduler = key;
  scheduler.worker_id.reset();
  h_.Ok("lookup", {KeyFrame(scheduler), IntFrame(1)});
  for (int i = 0; i < 3; ++i) {  // used every 400 s: survives 1200 s with a 600 s TTL
    h_.clock().Advance(400'000);
    h_.Ok("query_prefetch_lookup_hits", {StrFrame("req")});
    h_.service().RunMaintenance();
  }
  EXPECT_EQ(h_.Ok("query_prefetch_lookup_hits", {StrFrame("req")}).get().via.u64, 2u);
  h_.clock().Advance(601'000);
  h_.service().RunMaintenance();
  EXPECT_EQ(h_.Ok("query_prefetch_lookup_hits", {StrFrame("req")}).get().via.u64, 0u);
}

TEST_F(ServiceTest, RepeatedLookupReleasesUnconsumedLocks) {
  Register(1);
  KeyArgs key = Key(512, 2);
  Store(1, key);
  KeyArgs scheduler = key;
  scheduler.worker_id.reset();
  h_.Ok("lookup", {KeyFrame(scheduler), IntFrame(1)});
  h_.Ok("lookup", {KeyFrame(scheduler), IntFrame(1)});
  EXPECT_EQ(Table().locked_objects, 2u);
  h_.Ok("end_session", {StrFrame("req")});
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 0u);
}

TEST_F(ServiceTest, LookupValidationAndUnknownModels) {
  KeyArgs key = Key(512, 0);
  key.worker_id.reset();
  key.readers = 0;
  EXPECT_EQ(h_.Call("lookup", {KeyFrame(key), IntFrame(1)}).status.code(),
            ErrorCode::kInvalidArgument);
  key.readers = 1;
  h_.Ok("lookup", {KeyFrame(key), IntFrame(1)});  // nobody registered the model: 0 hits
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 0u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("unknown")}).get().via.u64, 0u);
  EXPECT_EQ(h_.Ok("wait_prefetch_status", {StrFrame("unknown"), msgpk::Encoder().Float(1.0).Take()})
                .get()
                .via.u64,
            0u);
}

TEST_F(ServiceTest, SmallOpsAndOurExtras) {
  EXPECT_EQ(h_.Ok("get_chunk_size", {}).get().via.u64, 256u);
  EXPECT_EQ(h_.Ok("noop", {}).get().as<std::string>(), "OK");
  EXPECT_EQ(h_.Ok("get_experimental", {}).get().via.array.size, 0u);
  EXPECT_TRUE(h_.Ok("ping", {}).get().via.boolean);
  EXPECT_TRUE(h_.Ok("ping", {msgpk::Encoder().Nil().Take()}).get().via.boolean);
  auto info = h_.Ok("server_info", {});
  EXPECT_EQ(Field(info.get(), "boot_id").as<std::string>(), h_.service().boot_id());
  EXPECT_EQ(Field(info.get(), "chunk_size").via.u64, 256u);
  auto stats = h_.Ok("stats", {});
  EXPECT_EQ(Field(Field(stats.get(), "l1"), "capacity_bytes").via.u64, 64ull << 20);
  EXPECT_GE(Field(Field(Field(stats.get(), "operations"), "ping"), "requests").via.u64, 2u);
  h_.Ok("report_block_allocation", {IntFrame(1), StrFrame("model"), msgpk::Encoder().Array(0).Take()});
  // The CUDA-IPC family decodes its frames (gpu_ops_test covers it): nil frames are malformed.
  for (const char* op : {"store", "retrieve", "register_kv_cache"}) {
    const OpRow* row = h_.service().ops().FindByName(op);
    std::vector<std::string> frames(row->spec.min_payloads, msgpk::Encoder().Nil().Take());
    auto reply = h_.Call(op, frames);
    EXPECT_EQ(reply.status.code(), ErrorCode::kMalformedRequest) << op << ": " << reply.status.ToString();
  }
}

TEST_F(ServiceTest, ClearKeepsLockedObjectsUnlessForced) {
  Register(1);
  KeyArgs key = Key(512, 2);
  Store(1, key);
  Store(1, Key(512, 2, 9, "other"));
  EXPECT_EQ(Lookup(key), 2u);
  h_.Ok("clear", {});
  EXPECT_EQ(Table().resident_objects, 2u);
  h_.Ok("clear", {msgpk::Encoder().Bool(true).Take()});
  EXPECT_EQ(Table().resident_objects, 0u);
  EXPECT_EQ(Table().retired_objects, 2u);  // memory kept until the readers finish
}

TEST_F(ServiceTest, StatsCountObjectsFlowingInAndOut) {
  Register(1);
  Store(1, Key(512, 2));
  Store(1, Key(512, 2));  // already resident: nothing new admitted
  h_.Ok("clear", {});
  auto stats = h_.Ok("stats", {});
  const msgpack::object& l1 = Field(stats.get(), "l1");
  EXPECT_EQ(Field(l1, "admitted_objects").via.u64, 2u);
  EXPECT_EQ(Field(l1, "admitted_bytes").via.u64, Field(l1, "deleted_bytes").via.u64);
  EXPECT_GT(Field(l1, "admitted_bytes").via.u64, 0u);
  EXPECT_EQ(Field(l1, "deleted_objects").via.u64, 2u);
  EXPECT_EQ(Field(l1, "tier_admitted_objects").via.u64, 0u);
}

TEST_F(ServiceTest, WhileDrainingNewRegistrationsAreRefusedAndRegisteredWorkersServed) {
  Register(1);
  h_.service().SetDraining(true);
  auto refused =
      h_.CallAs("other-connection", "register_kv_cache_engine_driven_context", {RegisterFrame(2)});
  EXPECT_EQ(refused.status.code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.status.message().find("draining"), std::string::npos);
  // The worker already registered keeps working, and may register again.
  EXPECT_TRUE(h_.Call("register_kv_cache_engine_driven_context", {RegisterFrame(1)}).status.ok());
  Store(1, Key(512, 2));
  EXPECT_TRUE(h_.Ok("ping", {IntFrame(1)}).get().via.boolean);
  h_.service().SetDraining(false);
  EXPECT_TRUE(
      h_.CallAs("other-connection", "register_kv_cache_engine_driven_context", {RegisterFrame(2)})
          .status.ok());
}

TEST_F(ServiceTest, GarbageInputNeverCrashesAndAlwaysFailsCleanly) {
  Register(1);
  std::mt19937 rng(7);
  for (int op_id = 1; op_id <= 34; ++op_id) {
    const OpRow* row = h_.service().ops().FindById(op_id);
    ASSERT_NE(row, nullptr);
    for (std::size_t frames = 0; frames <= row->spec.max_payloads + 1u && frames < 10; ++frames) {
      for (int trial = 0; trial < 5; ++trial) {
        std::vector<std::string> payloads;
        for (std::size_t f = 0; f < frames; ++f) {
          std::string garbage(rng() % 40, '\0');
          for (char& c : garbage) c = static_cast<char>(rng());
          payloads.push_back(garbage);
        }
        const Reply reply = h_.Call(row->spec.name, payloads);
        if (reply.status.ok()) {
          EXPECT_FALSE(reply.value.empty());
        }
      }
    }
  }
  EXPECT_TRUE(h_.Ok("ping", {}).get().via.boolean);
  EXPECT_EQ(Table().locked_objects, 0u);
}

class ServiceOomTest : public ServiceTest {
 protected:
  ServiceOomTest() : ServiceTest(4ull << 20, /*on_demand=*/false) {}
};

TEST_F(ServiceOomTest, PartialOomStoresOnlyAllocatedChunks) {
  Register(1);
  const KeyArgs big = Key(40 * 256, 40);  // 40 chunks of 128 KiB into a 4 MiB pool
  auto prepared = h_.Ok("prepare_store", {KeyFrame(big), IntFrame(1)});
  const auto slots = SlotsOf(Field(prepared.get(), "context"));
  EXPECT_EQ(slots.size(), 32u);
  EXPECT_EQ(Field(prepared.get(), "oom_chunks").via.u64, 8u);
  EXPECT_TRUE(h_.Ok("commit_store", {KeyFrame(big), IntFrame(1), msgpk::Encoder().Bin("").Take()})
                  .get()
                  .via.boolean);
  EXPECT_EQ(Table().resident_objects, 32u);
  KeyArgs again = big;
  again.request_id = "again";
  EXPECT_EQ(Lookup(again), 32u);  // exactly the stored prefix
}

TEST_F(ServiceTest, OnDemandEvictionMakesRoomForNewPrompts) {
  testing::ServiceHarness small(4ull << 20);
  ASSERT_TRUE(
      small.Call("register_kv_cache_engine_driven_context", {RegisterFrame(1)}).status.ok());
  for (std::uint32_t prompt = 1; prompt <= 3; ++prompt) {
    KeyArgs key = Key(16 * 256, 16, prompt, "p" + std::to_string(prompt));
    auto prepared = small.Ok("prepare_store", {KeyFrame(key), IntFrame(1)});
    EXPECT_EQ(SlotsOf(Field(prepared.get(), "context")).size(), 16u) << prompt;
    small.Ok("commit_store", {KeyFrame(key), IntFrame(1), msgpk::Encoder().Bin("").Take()});
  }
  EXPECT_GT(small.service().table().Stats().on_demand_evictions, 0u);
}

// With an L2 tier, the lookup's answer waits for the prefetch (spec 9.3).
class ServicePrefetchTest : public ::testing::Test {
 protected:
  ServicePrefetchTest()
      : prefetcher_(kObject), h_(64ull << 20, ServiceConfig{}, true, &prefetcher_) {
    prefetcher_.Attach(&h_.service().table());
    EXPECT_TRUE(h_.Call("register_kv_cache_engine_driven_context", {RegisterFrame(1)}).status.ok());
  }
  // Stores chunks 0-1 of a 4-chunk prompt in L1; returns the scheduler's
  // key of the whole prompt (worker_id nil), for a lookup.
  KeyArgs StoreHalfThePrompt() {
    KeyArgs stored = Key(1024, 2);
    h_.Ok("prepare_store", {KeyFrame(stored), IntFrame(1)});
    h_.Ok("commit_store", {KeyFrame(stored), IntFrame(1), msgpk::Encoder().Bin("").Take()});
    KeyArgs lookup = Key(1024, 0);
    lookup.worker_id.reset();
    return lookup;
  }
  testing::FakePrefetcher prefetcher_;
  testing::ServiceHarness h_;
};

TEST_F(ServicePrefetchTest, StatusIsNilUntilThePrefetchLandsThenCountsBothTiers) {
  KeyArgs lookup = StoreHalfThePrompt();  // L1 holds chunks 0-1 of a 4-chunk prompt
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(prefetcher_.pending(), 1u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().type, msgpack::type::NIL);
  EXPECT_EQ(h_.Ok("query_prefetch_lookup_hits", {StrFrame("req")}).get().type, msgpack::type::NIL);
  prefetcher_.Complete(prefetcher_.last_handle(), 1);  // L2 had chunk 2, not chunk 3
  EXPECT_EQ(h_.Ok("query_prefetch_lookup_hits", {StrFrame("req")}).get().via.u64, 3u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 3u);
  EXPECT_EQ(h_.service().table().Stats().locked_objects, 3u);  // L1 prefix + the landed chunk
  KeyArgs all = lookup;
  all.start = 0;
  all.end = 1024;
  h_.Ok("free_lookup_locks", {KeyFrame(all), IntFrame(1)});
  EXPECT_EQ(h_.service().table().Stats().locked_objects, 0u);
}

// KV events: chunks a prefetch loads from L2 are admitted to L1 knowing only
// their hashes; the lookup that asked for them named their tokens, so their
// stored records carry tokens and parents like a worker's store.
std::vector<std::uint32_t> ToVector(std::span<const std::uint32_t> tokens) {
  return {tokens.begin(), tokens.end()};
}

events::KvEventsConfig RecordingFromStart() {
  events::KvEventsConfig config;
  config.record_from_start = true;
  return config;
}

class ServiceKvEventsTest : public ::testing::Test {
 protected:
  ServiceKvEventsTest()
      : events_(RecordingFromStart(), store::ChunkSizes(256)),
        prefetcher_(kObject),
        h_(64ull << 20, ServiceConfig{}, true, &prefetcher_, nullptr, nullptr, &events_) {
    prefetcher_.Attach(&h_.service().table());
    EXPECT_TRUE(h_.Call("register_kv_cache_engine_driven_context", {RegisterFrame(1)}).status.ok());
  }
  std::vector<events::KvEvent> Stored() {
    std::vector<events::KvEvent> out;
    for (events::KvEvent& e : events_.log().ReadAfter(std::nullopt, 0, 1024).events) {
      if (e.kind == events::KvEventKind::kStored) out.push_back(std::move(e));
    }
    return out;
  }
  events::KvEvents events_;
  testing::FakePrefetcher prefetcher_;
  testing::ServiceHarness h_;
};

TEST_F(ServiceKvEventsTest, ChunksLoadedFromL2AreAnnouncedWithTheTokensTheLookupNamed) {
  KeyArgs lookup = Key(1024, 0);  // never stored here: L1 holds none of it
  lookup.worker_id.reset();
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_TRUE(Stored().empty());
  prefetcher_.Complete(prefetcher_.last_handle(), 2);  // L2 had chunks 0 and 1
  const std::vector<events::KvEvent> stored = Stored();
  ASSERT_EQ(stored.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(stored[i].medium, "CPU");
    EXPECT_EQ(stored[i].model_name, "model");
    EXPECT_EQ(ToVector(stored[i].token_ids()), std::vector<std::uint32_t>(lookup.tokens.begin() + i * 256,
                                                              lookup.tokens.begin() + (i + 1) * 256));
  }
  EXPECT_FALSE(stored[0].parent_block_hash.has_value());
  ASSERT_TRUE(stored[1].parent_block_hash.has_value());
  EXPECT_TRUE(*stored[1].parent_block_hash == stored[0].block_hashes.at(0));
  EXPECT_EQ(events_.recorder().Stats().unbound_stores, 0u);
}

TEST_F(ServicePrefetchTest, LookupHitsAreKnownOnceTheL2LookupsAreDoneBeforeTheLoadsLand) {
  KeyArgs lookup = StoreHalfThePrompt();  // L1 holds chunks 0-1 of a 4-chunk prompt
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(prefetcher_.request(prefetcher_.last_handle()).object_bytes, kObject);
  EXPECT_EQ(h_.Ok("query_prefetch_lookup_hits", {StrFrame("req")}).get().type, msgpack::type::NIL);
  prefetcher_.SetLookupHits(prefetcher_.last_handle(), 2);  // L2 holds chunks 2 and 3
  EXPECT_EQ(h_.Ok("query_prefetch_lookup_hits", {StrFrame("req")}).get().via.u64, 4u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().type, msgpack::type::NIL);
  prefetcher_.Complete(prefetcher_.last_handle(), 2);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 4u);
}

// wait_prefetch_status parks (issue 20): no pool thread waits, and the
// request is answered by whatever ends the wait.
class ServiceParkedWaitTest : public ServicePrefetchTest {
 protected:
  // Sends wait_prefetch_status for "req" from `connection` and returns its
  // reply to come, once the request is parked (or already answered).
  std::future<server::Reply> ParkedWait(double timeout_seconds,
                                        std::string connection = "test-connection") {
    const std::size_t before = h_.service().state().parked().size();
    auto reply = std::async(std::launch::async, [this, timeout_seconds, connection] {
      return h_.CallAs(connection, "wait_prefetch_status",
                       {StrFrame("req"), msgpk::Encoder().Float(timeout_seconds).Take()});
    });
    WaitUntil([&] {
      return h_.service().state().parked().size() != before ||
             reply.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
    });
    return reply;
  }
  void LookUp(std::string connection = "test-connection") {
    KeyArgs lookup = Key(512, 0);
    lookup.worker_id.reset();
    ASSERT_TRUE(h_.CallAs(connection, "lookup", {KeyFrame(lookup), IntFrame(1)}).status.ok());
  }
  static msgpack::object_handle Value(const server::Reply& reply) {
    EXPECT_TRUE(reply.status.ok()) << reply.status.ToString();
    return msgpack::unpack(reply.value.data(), reply.value.size());
  }
  std::uint64_t Ended(ParkEnd end) {
    const ParkedStats stats = h_.service().state().parked().Stats();
    return stats.by_operation.at("wait_prefetch_status").ended[static_cast<std::size_t>(end)];
  }
};

TEST_F(ServiceParkedWaitTest, AWaitParksAndIsAnsweredWhenThePrefetchLands) {
  LookUp();
  auto reply = ParkedWait(10);
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  // The handler parks first, then asks to be told of the landing (so that a
  // landing in between finds the parked request): wait for that second step.
  WaitUntil([&] { return prefetcher_.watchers(prefetcher_.last_handle()) != 0; });
  EXPECT_EQ(prefetcher_.watchers(prefetcher_.last_handle()), 1u);
  EXPECT_EQ(reply.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  prefetcher_.Complete(prefetcher_.last_handle(), 2);
  EXPECT_EQ(Value(reply.get()).get().via.u64, 2u);
  EXPECT_EQ(h_.service().state().parked().size(), 0u);
  EXPECT_EQ(Ended(ParkEnd::kWoken), 1u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 0u);  // consumed
}

TEST_F(ServiceParkedWaitTest, AWaitIsAnsweredNilAtItsDeadlineAndTheResultLater) {
  LookUp();
  auto reply = ParkedWait(0.01);
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  EXPECT_EQ(reply.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "the deadline is on the service's clock, which has not moved";
  h_.clock().Advance(10);
  EXPECT_EQ(Value(reply.get()).get().type, msgpack::type::NIL);
  EXPECT_EQ(Ended(ParkEnd::kDeadline), 1u);
  prefetcher_.Complete(prefetcher_.last_handle(), 2);
  EXPECT_EQ(h_.Ok("wait_prefetch_status", {StrFrame("req"), msgpk::Encoder().Float(0.01).Take()})
                .get()
                .via.u64,
            2u);  // landed: answered at once, never parked
  EXPECT_EQ(h_.service().state().parked().Stats().by_operation.at("wait_prefetch_status").parked,
            1u);
}

TEST_F(ServiceParkedWaitTest, AZeroTimeoutAnswersNilAtOnce) {
  LookUp();
  EXPECT_EQ(h_.Ok("wait_prefetch_status", {StrFrame("req"), msgpk::Encoder().Float(0).Take()})
                .get()
                .type,
            msgpack::type::NIL);
  EXPECT_EQ(h_.service().state().parked().Stats().by_operation.at("wait_prefetch_status").parked,
            0u);
}

// The client went: its wait is answered at once (not at its deadline), and
// only then is the connection released, locks included.
TEST_F(ServiceParkedWaitTest, AClosingConnectionAnswersItsWaitsAtOnce) {
  LookUp("scheduler");
  auto reply = ParkedWait(3600, "scheduler");
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  h_.service().OnClosing("other-client");
  EXPECT_EQ(h_.service().state().parked().size(), 1u);
  h_.service().OnClosing("scheduler");
  EXPECT_EQ(Value(reply.get()).get().type, msgpack::type::NIL);
  EXPECT_EQ(Ended(ParkEnd::kClosed), 1u);
  prefetcher_.Complete(prefetcher_.last_handle(), 2);
  EXPECT_GT(h_.service().table().Stats().locked_objects, 0u);
  h_.service().OnDisconnect("scheduler");
  EXPECT_EQ(h_.service().table().Stats().locked_objects, 0u);
}

TEST_F(ServiceParkedWaitTest, EndingTheSessionAnswersItsWaitWithZero) {
  LookUp();
  auto reply = ParkedWait(3600);
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  h_.Ok("end_session", {StrFrame("req")});
  EXPECT_EQ(Value(reply.get()).get().via.u64, 0u);  // the request is unknown by then
  EXPECT_EQ(prefetcher_.cancelled(), 1u);
  EXPECT_EQ(Ended(ParkEnd::kWoken), 1u);
}

TEST_F(ServiceParkedWaitTest, ADrainAnswersEveryWaitAndParksNoMore) {
  LookUp();
  auto reply = ParkedWait(3600);
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  h_.service().AnswerParked();
  EXPECT_EQ(Value(reply.get()).get().type, msgpack::type::NIL);
  EXPECT_EQ(Ended(ParkEnd::kDrained), 1u);
  const server::Reply refused = h_.Call("wait_prefetch_status", {StrFrame("req"), msgpk::Encoder().Float(5).Take()});
  EXPECT_EQ(refused.status.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(msgpack::unpack(refused.value.data(), refused.value.size()).get().via.u64, 0u)
      << "a refused wait still answers its declared type";
}

TEST_F(ServiceParkedWaitTest, AClientOverItsParkedLimitIsRefusedOthersAreNot) {
  const std::size_t limit = ServiceConfig{}.parked.per_connection;
  std::vector<std::future<server::Reply>> parked;
  for (std::size_t i = 0; i < limit; ++i) {
    KeyArgs lookup = Key(512, 0);
    lookup.worker_id.reset();
    lookup.request_id = "req-" + std::to_string(i);
    ASSERT_TRUE(h_.CallAs("greedy", "lookup", {KeyFrame(lookup), IntFrame(1)}).status.ok());
    parked.push_back(std::async(std::launch::async, [this, i] {
      return h_.CallAs("greedy", "wait_prefetch_status",
                       {StrFrame("req-" + std::to_string(i)), msgpk::Encoder().Float(3600).Take()});
    }));
  }
  WaitUntil([&] { return h_.service().state().parked().size() >= limit; });
  ASSERT_EQ(h_.service().state().parked().size(), limit);
  KeyArgs lookup = Key(512, 0);
  lookup.worker_id.reset();
  lookup.request_id = "one-more";
  ASSERT_TRUE(h_.CallAs("greedy", "lookup", {KeyFrame(lookup), IntFrame(1)}).status.ok());
  const server::Reply refused = h_.CallAs("greedy", "wait_prefetch_status",
                                          {StrFrame("one-more"), msgpk::Encoder().Float(3600).Take()});
  EXPECT_EQ(refused.status.code(), ErrorCode::kUnavailable) << refused.status.ToString();
  LookUp("polite");
  auto polite = ParkedWait(3600, "polite");
  EXPECT_EQ(h_.service().state().parked().size(), limit + 1);  // parked: its own share
  h_.service().OnClosing("greedy");
  for (auto& reply : parked) EXPECT_EQ(Value(reply.get()).get().type, msgpack::type::NIL);
  h_.service().OnClosing("polite");
  EXPECT_EQ(Value(polite.get()).get().type, msgpack::type::NIL);
}

// The reference's per-request load controls (its kv_load_policy design):
// lmcache.skip_load answers a miss with nothing locked or prefetched.
TEST_F(ServicePrefetchTest, SkipLoadAnswersAMissWithNothingLockedOrPrefetched) {
  KeyArgs lookup = StoreHalfThePrompt();  // L1 holds chunks 0-1 of a 4-chunk prompt
  lookup.skip_load = true;
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(prefetcher_.pending(), 0u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 0u);
  EXPECT_EQ(h_.service().table().Stats().locked_objects, 0u);
  const server::ServiceCounters& counters = h_.service().state().counters();
  EXPECT_EQ(counters.lookups_skip_load.load(), 1u);
  EXPECT_EQ(counters.lookup_requested_tokens.load(), 1024u);  // declined tokens still asked
  EXPECT_EQ(counters.lookup_hit_tokens.load(), 0u);
  // The same request without it loads as usual.
  lookup.skip_load = false;
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(prefetcher_.pending(), 1u);
  EXPECT_EQ(h_.service().table().Stats().locked_objects, 2u);
}

// Each stage of a lookup is timed once per lookup that reaches it
// (lookup_stage_duration_seconds): a skip_load lookup decodes its key but
// neither hashes nor locks.
TEST_F(ServicePrefetchTest, ALookupTimesEachStageItRuns) {
  KeyArgs lookup = StoreHalfThePrompt();  // L1 holds chunks 0-1 of a 4-chunk prompt
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  const server::ServiceCounters& counters = h_.service().state().counters();
  EXPECT_EQ(counters.lookup_decode_latency.Take().count, 1u);
  EXPECT_EQ(counters.lookup_hash_latency.Take().count, 1u);
  EXPECT_EQ(counters.lookup_lock_latency.Take().count, 1u);
  lookup.skip_load = true;
  lookup.request_id = "req-skip";
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(counters.lookup_decode_latency.Take().count, 2u);
  EXPECT_EQ(counters.lookup_hash_latency.Take().count, 1u);
  EXPECT_EQ(counters.lookup_lock_latency.Take().count, 1u);
  // free_lookup_locks decodes a key too, and is no lookup.
  h_.Ok("free_lookup_locks", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(counters.lookup_decode_latency.Take().count, 2u);
}

// lmcache.hint.engine_computed_tokens: the whole chunks the engine holds
// count as hits where cached, but are neither locked (no worker retrieves
// them) nor loaded from L2 (the prefetch is told how many it holds).
TEST_F(ServicePrefetchTest, ChunksTheEngineHoldsCountButAreNeitherLockedNorLoaded) {
  KeyArgs lookup = StoreHalfThePrompt();  // L1 holds chunks 0-1 of a 4-chunk prompt
  lookup.engine_computed_tokens = 300;  // chunk 0 whole, and part of chunk 1
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(h_.service().table().Stats().locked_objects, 1u);  // chunk 1 only
  ASSERT_EQ(prefetcher_.pending(), 1u);
  EXPECT_EQ(prefetcher_.request(prefetcher_.last_handle()).keys.size(), 2u);  // chunks 2-3
  EXPECT_EQ(prefetcher_.request(prefetcher_.last_handle()).held_chunks, 0u);
  prefetcher_.Complete(prefetcher_.last_handle(), 1);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 3u);

  // The engine holds all 4 chunks, L1 the first 3 (chunk 2 landed): nothing
  // more is locked, and the prefetch looks up chunk 3 knowing it is held.
  lookup.request_id = "req-2";
  lookup.engine_computed_tokens = 4 * 256;
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(h_.service().table().Stats().locked_objects, 2u);  // the first lookup's 1 + landed 1
  EXPECT_EQ(prefetcher_.request(prefetcher_.last_handle()).keys.size(), 1u);
  EXPECT_EQ(prefetcher_.request(prefetcher_.last_handle()).held_chunks, 1u);

  // A hint past the prompt: every chunk held; all resident needs no prefetch.
  KeyArgs short_lookup = Key(512, 0);
  short_lookup.worker_id.reset();
  short_lookup.request_id = "req-3";
  short_lookup.engine_computed_tokens = 100000;
  const tier::PrefetchHandle prefetches = prefetcher_.last_handle();
  h_.Ok("lookup", {KeyFrame(short_lookup), IntFrame(1)});
  EXPECT_EQ(prefetcher_.last_handle(), prefetches);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req-3")}).get().via.u64, 2u);
  const server::ServiceCounters& counters = h_.service().state().counters();
  EXPECT_EQ(counters.lookups_engine_hinted.load(), 3u);
  EXPECT_EQ(counters.lookup_engine_held_tokens.load(), (1 + 4 + 2) * 256u);
}

TEST_F(ServicePrefetchTest, FullL1HitNeedsNoPrefetch) {
  KeyArgs stored = Key(512, 2);
  h_.Ok("prepare_store", {KeyFrame(stored), IntFrame(1)});
  h_.Ok("commit_store", {KeyFrame(stored), IntFrame(1), msgpk::Encoder().Bin("").Take()});
  KeyArgs lookup = Key(512, 0);
  lookup.worker_id.reset();
  h_.Ok("lookup", {KeyFrame(lookup), IntFrame(1)});
  EXPECT_EQ(prefetcher_.pending(), 0u);
  EXPECT_EQ(h_.Ok("query_prefetch_status", {StrFrame("req")}).get().via.u64, 2u);
}

// Every request any operation accepts reaches the operation (and gets its
// reply, kTooLarge included) with room to spare: the transport drops larger
// frames without a reply.
TEST_F(ServiceTest, TheTransportReadsTwiceTheLargestPayloadAnyOperationAccepts) {
  for (const OpRow& row : h_.service().ops().rows()) {
    EXPECT_LE(2 * row.spec.max_request_bytes, static_cast<std::size_t>(transport::kMaxFrameBytes))
        << row.spec.name;
  }
}

// Issue 19: a burst of lookups with fresh request ids that are never ended
// expires one TTL later while other clients keep being served. Measured on
// the reference deployment shape before the fix: 200,000 such lookups from
// one client froze `stats` for over 30 s and another client's lookup took
// 35 s while their sessions expired. Here a million sessions expire (the
// first thousand made by real lookups and holding read leases, the rest
// made as a lookup makes them, noted for the burst's connection) while
// another client looks up and asks for stats.
TEST(ServiceBurst, AMillionExpiringSessionsStallNoOtherClient) {
  constexpr std::size_t kSessions = 1'000'000;
  constexpr std::size_t kLookedUp = 1'000;
  ServiceConfig config;
  config.sessions.idle_ttl_ms = 30'000;
  config.sessions.max_sessions = 2 * kSessions;
  config.sessions.max_bytes = 4ull << 30;  // expiry, not the memory cap, ends them
  testing::ServiceHarness h(64ull << 20, config);
  h.Ok("register_kv_cache_engine_driven_context", {RegisterFrame(1)});
  KeyArgs cached = Key(512, 2);
  h.Ok("prepare_store", {KeyFrame(cached), IntFrame(1)});
  ASSERT_TRUE(h.Ok("commit_store", {KeyFrame(cached), IntFrame(1), msgpk::Encoder().Bin("").Take()})
                  .get()
                  .via.boolean);
  KeyArgs burst = cached;
  burst.worker_id.reset();
  for (std::size_t i = 0; i < kLookedUp; ++i) {
    burst.request_id = "burst-" + std::to_string(i);
    ASSERT_TRUE(h.CallAs("burst", "lookup", {KeyFrame(burst), IntFrame(1)}).status.ok());
  }
  worker::SessionManager& sessions = h.service().sessions();
  for (std::size_t i = kLookedUp; i < kSessions; ++i) {
    const std::string id = "burst-" + std::to_string(i);
    ASSERT_NE(sessions.GetOrCreate(id), nullptr);
    sessions.NoteConnection(id, "burst");
  }
  ASSERT_EQ(sessions.size(), kSessions);
  ASSERT_EQ(h.service().table().Stats().locked_objects, 2u);
  h.clock().Advance(30'001);

  std::atomic<bool> expired{false};
  double maintenance_ms = 0;
  std::thread maintenance([&] {
    const auto start = std::chrono::steady_clock::now();
    h.service().RunMaintenance();
    maintenance_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    expired.store(true);
  });
  KeyArgs other = Key(512, 2, /*seed=*/2);  // not cached: its lookups lock nothing
  other.worker_id.reset();
  // One of the other client's turns: a lookup, then stats; their durations.
  const auto serve_other = [&](const std::string& request_id, std::vector<double>& lookups,
                               std::vector<double>& stats) {
    other.request_id = request_id;
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(h.CallAs("other", "lookup", {KeyFrame(other), IntFrame(1)}).status.ok());
    const auto looked_up = std::chrono::steady_clock::now();
    ASSERT_TRUE(h.CallAs("other", "stats", {}).status.ok());
    const auto stats_done = std::chrono::steady_clock::now();
    lookups.push_back(std::chrono::duration<double, std::milli>(looked_up - start).count());
    stats.push_back(std::chrono::duration<double, std::milli>(stats_done - looked_up).count());
  };
  std::vector<double> lookup_ms;
  std::vector<double> stats_ms;
  for (int i = 0; !expired.load(); ++i) {
    serve_other("other-" + std::to_string(i), lookup_ms, stats_ms);
    if (::testing::Test::HasFatalFailure()) break;  // maintenance still joins
  }
  maintenance.join();
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  ASSERT_FALSE(lookup_ms.empty());
  // Every burst session went, with the read leases its lookups held.
  EXPECT_EQ(sessions.size(), lookup_ms.size());
  EXPECT_EQ(h.service().table().Stats().locked_objects, 0u);

  // The same turn with nothing expiring, on this machine in this run: how
  // many turns the expiry's duration would hold if it slowed them not at all.
  std::vector<double> idle_lookup_ms;
  std::vector<double> idle_stats_ms;
  for (int i = 0; i < 21; ++i) {
    serve_other("idle-" + std::to_string(i), idle_lookup_ms, idle_stats_ms);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
  }
  std::vector<double> idle_turn_ms;
  for (std::size_t i = 0; i < idle_lookup_ms.size(); ++i) {
    idle_turn_ms.push_back(idle_lookup_ms[i] + idle_stats_ms[i]);
  }
  std::sort(idle_turn_ms.begin(), idle_turn_ms.end());
  const double idle_turns = maintenance_ms / std::max(idle_turn_ms[idle_turn_ms.size() / 2], 1e-3);

  const auto p99_of = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[(values.size() * 99 + 99) / 100 - 1];
  };
  const double lookup_p99 = p99_of(lookup_ms);
  const double stats_p99 = p99_of(stats_ms);
  const double lookup_max = *std::max_element(lookup_ms.begin(), lookup_ms.end());
  const double stats_max = *std::max_element(stats_ms.begin(), stats_ms.end());
  std::vector<double> sorted_lookup_ms = lookup_ms;
  std::sort(sorted_lookup_ms.begin(), sorted_lookup_ms.end());
  // The figures the note quotes.
  std::printf(
      "[burst] %zu lookups (%.0f at the idle pace) while %zu sessions expired in %.0f ms: "
      "p50 %.3f ms, p99 %.3f ms, max %.3f ms; stats p99 %.3f ms, max %.3f ms\n",
      lookup_ms.size(), idle_turns, kSessions, maintenance_ms,
      sorted_lookup_ms[sorted_lookup_ms.size() / 2], lookup_p99, lookup_max, stats_p99,
      stats_max);
  // What this guards against is the stall: before the fix the expiry held the
  // session lock throughout, so the other client's lookup and stats each
  // waited for all of it (35 s), and only the first of its calls ran. Every
  // bound is relative to this run: the expiry's own duration, and the pace of
  // the same calls with nothing expiring. A loaded machine or a sanitizer
  // slows both alike (a fixed 500 ms bound for TSan failed on a loaded CI
  // machine at 586 ms while the expiry took 40 s). A single call's time is
  // one scheduler hiccup away from any figure on a machine shared with
  // CPU-bound neighbours, so the "short waits" bound is on the 99th
  // percentile, and the slowest call is held only to what a stall would
  // break (half the expiry). The other client must get 100 turns, or, where
  // the calls are slow against the expiry (a sanitizer beside CPU hogs), a
  // twentieth of the turns its idle pace would fit. Measured unloaded: the
  // longest wait is about 1 % of the expiry.
  const double min_turns = std::min(100.0, idle_turns / 20);
  EXPECT_GE(static_cast<double>(lookup_ms.size()), min_turns)
      << "the other client was served only " << lookup_ms.size() << " times during "
      << maintenance_ms << " ms of expiry, against " << idle_turns << " at its idle pace";
  EXPECT_LT(lookup_p99, maintenance_ms / 10);
  EXPECT_LT(stats_p99, maintenance_ms / 10);
  EXPECT_LT(lookup_max, maintenance_ms / 2);
  EXPECT_LT(stats_max, maintenance_ms / 2);
}


// A store that needs pages the pre-faulter has not made ready yet parks
// instead of holding its pool thread (issue 20): the first minutes after a
// large pool starts. The pool here is 64 MiB made ready in 4 MiB steps, held
// at 4 MiB (32 objects); a 64-chunk prepare_store needs 8 MiB.
class ServiceWarmingPoolTest : public ::testing::Test {
 protected:
  static constexpr std::uint64_t kStep = 4ull << 20;
  static constexpr std::int64_t kChunks = 64;

  ServiceWarmingPoolTest()
      : gate_(kStep),
        h_(64ull << 20, ServiceConfig{}, true, nullptr, nullptr,
           [this](store::L1Config& l1) { gate_.Hold(l1, kStep); }) {
    WaitUntil([&] { return h_.l1().allocator().ready_bytes() >= kStep; });
    EXPECT_EQ(h_.l1().allocator().ready_bytes(), kStep);
    EXPECT_TRUE(h_.Call("register_kv_cache_engine_driven_context", {RegisterFrame(1)}).status.ok());
  }
  ~ServiceWarmingPoolTest() override { gate_.Open(); }

  // Sends prepare_store of kChunks chunks from `connection` and returns its
  // reply to come, once the request is parked (or already answered).
  std::future<server::Reply> ParkedPrepare(const KeyArgs& key,
                                           std::string connection = "test-connection") {
    const std::size_t before = h_.service().state().parked().size();
    auto reply = std::async(std::launch::async, [this, key, connection] {
      return h_.CallAs(connection, "prepare_store", {KeyFrame(key), IntFrame(1)});
    });
    WaitUntil([&] {
      return h_.service().state().parked().size() != before ||
             reply.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready;
    });
    return reply;
  }
  static std::vector<Slot> SlotsOfReply(const server::Reply& reply) {
    EXPECT_TRUE(reply.status.ok()) << reply.status.ToString();
    const msgpack::object_handle h = msgpack::unpack(reply.value.data(), reply.value.size());
    return SlotsOf(Field(h.get(), "context"));
  }
  std::uint64_t Ended(ParkEnd end) {
    const ParkedStats stats = h_.service().state().parked().Stats();
    return stats.by_operation.at("prepare_store").ended[static_cast<std::size_t>(end)];
  }
  void Commit(const KeyArgs& key) {
    const server::Reply done =
        h_.Call("commit_store", {KeyFrame(key), IntFrame(1), msgpk::Encoder().Bin("").Take()});
    EXPECT_TRUE(done.status.ok()) << done.status.ToString();
  }

  testing::PrefaultGate gate_;  // before h_, which holds it
  testing::ServiceHarness h_;
};

TEST_F(ServiceWarmingPoolTest, AStoreThatMustWaitForPagesParksAndIsAnsweredWhenTheyCome) {
  const KeyArgs key = Key(kChunks * 256, kChunks);
  auto reply = ParkedPrepare(key);
  ASSERT_EQ(h_.service().state().parked().size(), 1u)
      << "the prepare_store held its thread instead of parking";
  EXPECT_EQ(reply.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  EXPECT_EQ(h_.service().table().Stats().staging_objects, 0u) << "a parked store reserves nothing";
  // Another client is served meanwhile, on this (the only) thread.
  ASSERT_TRUE(h_.CallAs("scheduler", "ping", {}).status.ok());
  gate_.Allow(2 * kStep);  // 64 objects' room: the store goes through
  const std::vector<Slot> slots = SlotsOfReply(reply.get());
  EXPECT_EQ(slots.size(), static_cast<std::size_t>(kChunks));
  EXPECT_EQ(Ended(ParkEnd::kWoken), 1u);
  EXPECT_EQ(h_.service().state().parked().size(), 0u);
  Commit(key);
  EXPECT_EQ(h_.service().table().Stats().resident_objects, static_cast<std::uint64_t>(kChunks));
  EXPECT_EQ(h_.service().table().Stats().write_leases, 0u);
}

TEST_F(ServiceWarmingPoolTest, AtItsDeadlineAParkedStoreTakesWhatIsReady) {
  const KeyArgs key = Key(kChunks * 256, kChunks);
  auto reply = ParkedPrepare(key);
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  EXPECT_EQ(reply.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
      << "the deadline is on the service's clock, which has not moved";
  h_.clock().Advance(h_.service().table().prefault_wait().count());
  const server::Reply answered = reply.get();
  const std::vector<Slot> slots = SlotsOfReply(answered);
  EXPECT_EQ(slots.size(), 32u) << "the longest prefix the ready pages hold";
  const msgpack::object_handle value = msgpack::unpack(answered.value.data(), answered.value.size());
  EXPECT_EQ(Field(value.get(), "oom_chunks").via.u64, static_cast<std::uint64_t>(kChunks) - 32u);
  EXPECT_EQ(Ended(ParkEnd::kDeadline), 1u);
  Commit(key);
  EXPECT_EQ(h_.service().table().Stats().resident_objects, 32u);
}

TEST_F(ServiceWarmingPoolTest, AParkedStoreOfAClosedClientIsAnsweredAtOnceAndLeavesNothing) {
  const KeyArgs key = Key(kChunks * 256, kChunks);
  // The same writer's earlier reservation (prepared, never committed) is
  // handed back to the new prepare, and must not outlive it either.
  const KeyArgs first = Key(8 * 256, 8);
  ASSERT_EQ(SlotsOfReply(h_.Call("prepare_store", {KeyFrame(first), IntFrame(1)})).size(), 8u);
  auto reply = ParkedPrepare(key);
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  h_.service().OnClosing("test-connection");
  const server::Reply closed = reply.get();
  EXPECT_EQ(closed.status.code(), ErrorCode::kUnavailable) << closed.status.ToString();
  EXPECT_EQ(Ended(ParkEnd::kClosed), 1u);
  h_.service().OnDisconnect("test-connection");
  gate_.Allow(2 * kStep);  // pages coming later wake nothing
  const store::TableStats table = h_.service().table().Stats();
  EXPECT_EQ(table.staging_objects, 0u);
  EXPECT_EQ(table.write_leases, 0u);
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), 0u);
}

TEST_F(ServiceWarmingPoolTest, ADrainAnswersAParkedStore) {
  auto reply = ParkedPrepare(Key(kChunks * 256, kChunks));
  ASSERT_EQ(h_.service().state().parked().size(), 1u);
  h_.service().AnswerParked();
  const server::Reply drained = reply.get();
  EXPECT_EQ(drained.status.code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(SlotsOfReply(server::Reply{Status::Ok(), drained.value}).empty())
      << "a refused prepare_store still answers its declared type";
  EXPECT_EQ(Ended(ParkEnd::kDrained), 1u);
  EXPECT_EQ(h_.service().table().Stats().staging_objects, 0u);
}

// Pages made ready between the failed reservation and the park wake it at
// once: many stores racing the pre-faulter all end up answered.
TEST_F(ServiceWarmingPoolTest, StoresRacingThePrefaulterAreAllAnswered) {
  std::vector<std::future<server::Reply>> replies;
  for (std::uint32_t i = 0; i < 8; ++i) {
    const KeyArgs key = Key(16 * 256, 16, 100 + i);
    replies.push_back(std::async(std::launch::async, [this, key] {
      return h_.Call("prepare_store", {KeyFrame(key), IntFrame(1)});
    }));
  }
  for (std::uint64_t allowed = 2 * kStep; allowed <= 64ull << 20; allowed += kStep) {
    gate_.Allow(allowed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::size_t slots = 0;
  for (auto& reply : replies) slots += SlotsOfReply(reply.get()).size();
  EXPECT_EQ(slots, 8u * 16u);
  EXPECT_EQ(h_.service().state().parked().size(), 0u);
}

}  // namespace
}  // namespace lmcache::server
