// Regressions of issue 7 (exact leases): each test replays one finding with the
// frames of its report, in-process, and checks the lock and byte balance.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "fakes/blocking_policy.h"
#include "fakes/service_harness.h"

namespace lmcache::server {
namespace {

using testing::Field;
using testing::IntFrame;
using testing::KeyArgs;
using testing::KeyFrame;
using testing::RegisterFrame;
using testing::SlotOffsets;
using testing::StrFrame;
using testing::Tokens;

constexpr std::uint64_t kObject = 2 * 2 * 256 * 64 * 2;  // [2, 2, 256, 64] bfloat16

// Strict UTF-8 (RFC 3629): what a client's strict msgpack str decoding accepts.
bool ValidUtf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    std::size_t extra = 0;
    std::uint32_t min = 0;
    if (b < 0x80) {
      i += 1;
      continue;
    } else if ((b & 0xe0) == 0xc0) {
      extra = 1, min = 0x80;
    } else if ((b & 0xf0) == 0xe0) {
      extra = 2, min = 0x800;
    } else if ((b & 0xf8) == 0xf0) {
      extra = 3, min = 0x10000;
    } else {
      return false;
    }
    if (i + extra >= text.size() + (extra == 0)) return false;
    std::uint32_t cp = b & (0x3f >> extra);
    for (std::size_t j = 1; j <= extra; ++j) {
      if (i + j >= text.size()) return false;
      const auto c = static_cast<unsigned char>(text[i + j]);
      if ((c & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

KeyArgs Key(std::size_t tokens, std::int64_t end_chunks, std::uint32_t seed, std::string request,
            std::string salt = "") {
  KeyArgs key;
  key.tokens = Tokens(tokens, seed);
  key.end = end_chunks * 256;
  key.request_id = std::move(request);
  key.salt = std::move(salt);
  return key;
}

std::unique_ptr<store::EvictionPolicy> NewBlockingPolicy(testing::BlockingPolicy** out) {
  auto policy = std::make_unique<testing::BlockingPolicy>();
  *out = policy.get();
  return policy;
}

class Issue7Test : public ::testing::Test {
 protected:
  explicit Issue7Test(std::uint64_t pool = 64ull << 20)
      : h_(pool, ServiceConfig{}, true, nullptr, NewBlockingPolicy(&policy_)) {}

  void Register(std::int64_t instance, std::string_view connection = "conn-a",
                std::int64_t world_size = 1) {
    auto reply = h_.CallAs(connection, "register_kv_cache_engine_driven_context",
                           {RegisterFrame(instance, "model", world_size)});
    ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  }
  // prepare_store, fill every slot with `fill`, commit_store.
  void Store(std::int64_t instance, const KeyArgs& key, std::uint8_t fill,
             std::string_view connection = "conn-a") {
    auto prepared = h_.CallAs(connection, "prepare_store", {KeyFrame(key), IntFrame(instance)});
    ASSERT_TRUE(prepared.status.ok()) << prepared.status.ToString();
    auto value = std::move(msgpk::Parse(prepared.value, "prepare_store")).value();
    for (const std::uint64_t offset : SlotOffsets(Field(value.get(), "context"))) {
      std::memset(h_.pool() + offset, fill, kObject);
    }
    auto done = h_.CallAs(connection, "commit_store",
                          {KeyFrame(key), IntFrame(instance), msgpk::Encoder().Bin("").Take()});
    ASSERT_TRUE(done.status.ok()) << done.status.ToString();
  }
  // prepare_retrieve; the slot offsets on success.
  Result<std::vector<std::uint64_t>> PrepareRetrieve(std::int64_t instance, const KeyArgs& key,
                                                     std::string_view connection = "conn-a") {
    auto reply = h_.CallAs(connection, "prepare_retrieve", {KeyFrame(key), IntFrame(instance)});
    if (!reply.status.ok()) return reply.status;
    auto value = std::move(msgpk::Parse(reply.value, "prepare_retrieve")).value();
    return SlotOffsets(Field(value.get(), "context"));
  }
  void CommitRetrieve(std::int64_t instance, const KeyArgs& key,
                      std::string_view connection = "conn-a") {
    auto reply = h_.CallAs(connection, "commit_retrieve", {KeyFrame(key), IntFrame(instance)});
    ASSERT_TRUE(reply.status.ok()) << reply.status.ToString();
  }
  std::uint64_t Lookup(const KeyArgs& key) {
    KeyArgs scheduler = key;
    scheduler.worker_id.reset();
    EXPECT_TRUE(h_.CallAs("scheduler", "lookup", {KeyFrame(scheduler), IntFrame(1)}).status.ok());
    return h_.Ok("query_prefetch_status", {StrFrame(key.request_id)}).get().via.u64;
  }
  store::TableStats Table() { return h_.service().table().Stats(); }

  testing::BlockingPolicy* policy_ = nullptr;  // owned by the harness's L1
  testing::ServiceHarness h_;
};

// Finding 1: A and B both prepare_retrieve chunk K; A's commit must not release
// B's lock, and a flood of stores must not overwrite B's slot while B copies.
TEST_F(Issue7Test, ReaderKeepsItsLeaseWhenAnotherReaderCommits) {
  Register(1, "conn-a");
  Register(2, "conn-b");
  const KeyArgs k = Key(256, 1, 1, "s");
  Store(1, k, 0xab, "conn-a");
  auto a = PrepareRetrieve(1, k, "conn-a");
  auto b = PrepareRetrieve(2, k, "conn-b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ(Table().locked_objects, 1u);
  CommitRetrieve(1, k, "conn-a");
  EXPECT_EQ(Table().locked_objects, 1u) << "B's lease was released by A's commit";
  // 600 other chunks through a 512-object pool: on-demand eviction runs, and
  // must skip the object B is still reading.
  for (std::uint32_t i = 0; i < 600; ++i) Store(1, Key(256, 1, 1000 + i, "flood"), 0x11);
  const std::byte* slot = h_.pool() + b->front();
  EXPECT_EQ(slot[0], std::byte{0xab});
  EXPECT_EQ(slot[kObject - 1], std::byte{0xab});
  CommitRetrieve(2, k, "conn-b");
  EXPECT_EQ(Table().locked_objects, 0u);
}

// Finding 1, realistic variant: R1's lookup lease expires, R2 looks the same
// chunk up, both workers prepare; R1's commit must leave R2's lease alone.
TEST_F(Issue7Test, ExpiredLookupLeaseReaderDoesNotReleaseAFreshOne) {
  Register(1, "conn-a");
  Register(2, "conn-b");
  Store(1, Key(256, 1, 1, "s"), 0x42, "conn-a");
  ASSERT_EQ(Lookup(Key(256, 1, 1, "r1")), 1u);
  h_.clock().Advance(301'000);  // past the 300 s read lease
  ASSERT_EQ(Lookup(Key(256, 1, 1, "r2")), 1u);
  ASSERT_TRUE(PrepareRetrieve(1, Key(256, 1, 1, "r1"), "conn-a").ok());
  ASSERT_TRUE(PrepareRetrieve(2, Key(256, 1, 1, "r2"), "conn-b").ok());
  CommitRetrieve(1, Key(256, 1, 1, "r1"), "conn-a");
  EXPECT_EQ(Table().locked_objects, 1u) << "R2's reader lost its lock to R1's commit";
  EXPECT_EQ(h_.service().table().EvictLru(1ull << 30).objects, 0u);
  CommitRetrieve(2, Key(256, 1, 1, "r2"), "conn-b");
  EXPECT_EQ(Table().locked_objects, 0u);
}

// Runs `op` for instance 7 on a thread, parks it after its registration was
// checked (`park` returns once it is parked), unregisters 7 meanwhile, then
// lets the request go on.
server::Reply RaceUnregister(testing::ServiceHarness& h, std::string_view op, const KeyArgs& key,
                             const std::function<void()>& park,
                             const std::function<void()>& unpark) {
  std::future<server::Reply> reply = std::async(std::launch::async, [&] {
    return h.CallAs("conn-a", op, {KeyFrame(key), IntFrame(7)});
  });
  park();
  EXPECT_TRUE(
      h.CallAs("conn-a", "unregister_kv_cache_engine_driven_context", {IntFrame(7)}).status.ok());
  unpark();
  return reply.get();
}

// Finding 2: unregister while a prepare_store is in flight (parked in its
// on-demand eviction, the pool being full): the prepare fails and leaves
// nothing staged.
TEST_F(Issue7Test, UnregisterDuringPrepareStoreLeavesNothingStaged) {
  Register(1, "conn-b");
  for (std::uint32_t i = 0; i < 512; ++i) Store(1, Key(256, 1, 5000 + i, "fill"), 0x01, "conn-b");
  Register(7);
  policy_->Arm();
  const server::Reply reply = RaceUnregister(
      h_, "prepare_store", Key(4096, 16, 3, "rr"),
      [this] { ASSERT_TRUE(policy_->WaitParked()) << "prepare_store never reached eviction"; },
      [this] { policy_->Release(); });
  EXPECT_EQ(reply.status.code(), ErrorCode::kNotRegistered) << reply.status.ToString();
  EXPECT_EQ(Table().staging_objects, 0u);
  EXPECT_EQ(Table().locked_objects, 0u);
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), Table().resident_bytes);
}

// Finding 2, read side (parked on the request's session, which a retrieve
// takes to consume the lookup's locks): the prepare_retrieve fails and holds
// no read lock.
TEST_F(Issue7Test, UnregisterDuringPrepareRetrieveLeavesNoLock) {
  Register(7);
  Store(7, Key(4096, 16, 3, "writer"), 0x33);
  std::shared_ptr<worker::Session> session = h_.service().sessions().GetOrCreate("rr");
  // Held before the request starts: taken after, a request scheduled first
  // could finish without ever waiting for it, and the test would wait forever.
  std::optional<MutexLock> busy(&session->mu);
  const server::Reply reply = RaceUnregister(
      h_, "prepare_retrieve", Key(4096, 16, 3, "rr"),
      [&] {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (session->mu.waiters() == 0 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ASSERT_GT(session->mu.waiters(), 0u) << "prepare_retrieve never waited for its session";
      },
      [&] { busy.reset(); });
  EXPECT_EQ(reply.status.code(), ErrorCode::kNotRegistered) << reply.status.ToString();
  EXPECT_EQ(Table().locked_objects, 0u);
}

// Finding 4: end_session releases the locks of a lookup nobody retrieved, and
// a later free_lookup_locks is a no-op.
TEST_F(Issue7Test, EndSessionReleasesAbandonedLookupLocks) {
  Register(1);
  Store(1, Key(512, 2, 5, "s"), 0x55);
  ASSERT_EQ(Lookup(Key(512, 2, 5, "q")), 2u);
  EXPECT_EQ(Table().locked_objects, 2u);
  EXPECT_TRUE(h_.Call("end_session", {StrFrame("q")}).status.ok());
  KeyArgs scheduler = Key(512, 2, 5, "q");
  scheduler.worker_id.reset();
  EXPECT_TRUE(h_.Call("free_lookup_locks", {KeyFrame(scheduler), IntFrame(1)}).status.ok());
  EXPECT_EQ(Table().locked_objects, 0u);
}

// Departure (finding 2, design 6): a scheduler whose connection closes after
// a lookup leaves no locks behind, and a dead worker's staged writes go at once.
TEST_F(Issue7Test, AClosedConnectionsLookupsAndTransfersAreReleasedAtOnce) {
  Register(1, "worker");
  Store(1, Key(512, 2, 8, "s"), 0x71, "worker");
  KeyArgs scheduler = Key(512, 2, 8, "q");
  scheduler.worker_id.reset();
  ASSERT_TRUE(h_.CallAs("scheduler", "lookup", {KeyFrame(scheduler), IntFrame(1)}).status.ok());
  ASSERT_TRUE(h_.CallAs("worker", "prepare_store", {KeyFrame(Key(1024, 4, 9, "w")), IntFrame(1)})
                  .status.ok());
  EXPECT_EQ(Table().locked_objects, 2u + 4u);
  h_.service().OnDisconnect("scheduler");
  EXPECT_EQ(Table().locked_objects, 4u);  // the lookup's locks went; the staged writes remain
  h_.service().OnDisconnect("worker");
  EXPECT_EQ(Table().locked_objects, 0u);
  EXPECT_EQ(Table().staging_objects, 0u);
  EXPECT_EQ(h_.service().instances().size(), 0u);
  EXPECT_EQ(Table().read_leases + Table().write_leases, 0u);
}

// Finding 12: a worker that crashed and re-registers the same instance id from
// a new connection gets the dead process's staged writes dropped at once.
TEST_F(Issue7Test, ReRegistrationFromANewConnectionDropsTheOldStagedWrites) {
  Register(7, "old-process");
  ASSERT_TRUE(
      h_.CallAs("old-process", "prepare_store", {KeyFrame(Key(1024, 4, 9, "w")), IntFrame(7)})
          .status.ok());
  ASSERT_EQ(Table().staging_objects, 4u);
  Register(7, "new-process");
  EXPECT_EQ(Table().staging_objects, 0u);
  EXPECT_EQ(h_.l1().allocator().UsedBytes(), 0u);
}

// Finding 12: one request_id used by two tenants (different cache salts):
// the second lookup must not release the first one's locks.
TEST_F(Issue7Test, SameRequestIdOfTwoTenantsKeepsTheirLookupsApart) {
  Register(1);
  Store(1, Key(512, 2, 6, "s", "tenant-a"), 0x61);
  Store(1, Key(512, 2, 6, "s", "tenant-b"), 0x62);
  KeyArgs a = Key(512, 2, 6, "same", "tenant-a");
  KeyArgs b = Key(512, 2, 6, "same", "tenant-b");
  a.worker_id.reset();
  b.worker_id.reset();
  ASSERT_TRUE(h_.CallAs("scheduler", "lookup", {KeyFrame(a), IntFrame(1)}).status.ok());
  ASSERT_TRUE(h_.CallAs("scheduler", "lookup", {KeyFrame(b), IntFrame(1)}).status.ok());
  EXPECT_EQ(Table().locked_objects, 4u) << "tenant b's lookup released tenant a's locks";
}

// Finding 8: a request's invalid UTF-8 never reaches a reply as a msgpack str.
TEST_F(Issue7Test, InvalidUtf8IsNotEchoedIntoReplies) {
  const server::Reply reply = h_.Call("register_kv_cache_engine_driven_context",
                                      {RegisterFrame(1, "model", 1, 2, 64, "b\xe6loat16")});
  ASSERT_FALSE(reply.status.ok());
  EXPECT_TRUE(ValidUtf8(reply.status.message())) << reply.status.message();
}

}  // namespace
}  // namespace lmcache::server
