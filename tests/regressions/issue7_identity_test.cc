// Regressions of issue 7, finding 7: "anyone who can reach the tcp endpoint can
// act as any instance". Each test drives the Service through the request path
// the transport uses (Route an operation frame, Handle it, read the reply
// frames back) with distinct connection identities, and checks both the
// refusal (PERMISSION_DENIED, code 105, in the error frame) and that the
// victim's registration, staged bytes, leases and the cache are untouched.
//
// What the harness can and cannot express: a RequestContext carries the
// connection id, the transport and `local_peer`. RouterLoop sets local_peer
// from the tcp Peer-Address (IsLoopback); these tests set it directly, so a
// "remote tcp peer" here is a tcp context with local_peer = false, exactly what
// RouterLoop hands the Service for a non-loopback address. The address-to-flag
// mapping itself is not exercised here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "fakes/parse_flags.h"
#include "fakes/service_harness.h"
#include "daemon/config.h"

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
constexpr std::int64_t kPermissionDeniedCode = 105;      // the wire value, not the enum
static_assert(static_cast<std::int64_t>(ErrorCode::kPermissionDenied) == kPermissionDeniedCode);

KeyArgs Key(std::size_t tokens, std::int64_t end_chunks, std::uint32_t seed, std::string request) {
  KeyArgs key;
  key.tokens = Tokens(tokens, seed);
  key.end = end_chunks * 256;
  key.request_id = std::move(request);
  return key;
}

RequestContext Context(std::string_view connection, Transport transport, bool local_peer) {
  RequestContext context;
  context.connection = connection;
  context.transport = transport;
  context.local_peer = local_peer;
  return context;
}

// The peers the transport can hand the Service.
RequestContext Ipc(std::string_view c) { return Context(c, Transport::kIpc, true); }
RequestContext Inproc(std::string_view c) { return Context(c, Transport::kInproc, true); }
RequestContext TcpLoopback(std::string_view c) { return Context(c, Transport::kTcp, true); }
RequestContext TcpRemote(std::string_view c) { return Context(c, Transport::kTcp, false); }

// The reply frames as the transport sends them back.
struct WireReply {
  std::string value;                 // frame 3
  std::optional<std::string> error;  // frame 4
  // The error frame's "code" as sent on the wire; -1 when the call succeeded.
  std::int64_t code() const {
    if (!error) return -1;
    auto parsed = msgpk::Parse(*error, "error");
    if (!parsed.ok()) {
      ADD_FAILURE() << "error frame does not parse";
      return -2;
    }
    return Field(parsed->get(), "code").as<std::int64_t>();
  }
  std::string message() const {
    if (!error) return "";
    return Field(std::move(msgpk::Parse(*error, "error")).value().get(), "message").as<std::string>();
  }
  msgpack::object_handle Value() const { return std::move(msgpk::Parse(value, "value")).value(); }
};

class IdentityHarness {
 public:
  explicit IdentityHarness(ServiceConfig config = {}) : h_(64ull << 20, config) {}

  // Route(op frame) -> Handle -> reply frames: what RouterLoop does with a request.
  WireReply Send(const RequestContext& context, std::string_view op,
                 std::vector<std::string> frames) {
    auto route = h_.service().Route(StrFrame(op));
    EXPECT_TRUE(route.ok()) << op;
    if (!route.ok()) return {};
    std::vector<std::string_view> views(frames.begin(), frames.end());
    std::promise<ReplyFrames> promise;
    std::future<ReplyFrames> future = promise.get_future();
    h_.service().Handle(*route, context, views,
                        [&promise](ReplyFrames back) { promise.set_value(std::move(back)); });
    ReplyFrames frames_back = future.get();
    return {std::move(frames_back.value), std::move(frames_back.error)};
  }
  WireReply MustSucceed(const RequestContext& context, std::string_view op,
                        std::vector<std::string> frames) {
    WireReply reply = Send(context, op, std::move(frames));
    EXPECT_FALSE(reply.error) << op << " failed: " << reply.message();
    return reply;
  }

  void Register(std::int64_t instance, std::string_view connection) {
    MustSucceed(Ipc(connection), "register_kv_cache_engine_driven_context",
                {RegisterFrame(instance)});
  }
  // prepare_store; the slot offsets it handed out.
  std::vector<std::uint64_t> PrepareStore(std::int64_t instance, const KeyArgs& key,
                                          std::string_view connection) {
    WireReply reply =
        MustSucceed(Ipc(connection), "prepare_store", {KeyFrame(key), IntFrame(instance)});
    if (reply.error) return {};
    return SlotOffsets(Field(reply.Value().get(), "context"));
  }
  WireReply CommitStore(const RequestContext& from, std::int64_t instance, const KeyArgs& key) {
    return Send(from, "commit_store",
                {KeyFrame(key), IntFrame(instance), msgpk::Encoder().Bin("").Take()});
  }
  // prepare_store, fill, commit_store, all from `connection`.
  void Store(std::int64_t instance, const KeyArgs& key, std::uint8_t fill,
             std::string_view connection) {
    for (const std::uint64_t offset : PrepareStore(instance, key, connection)) Fill(offset, fill);
    WireReply done = CommitStore(Ipc(connection), instance, key);
    ASSERT_FALSE(done.error) << done.message();
    EXPECT_TRUE(done.Value().get().via.boolean);
  }
  std::vector<std::uint64_t> PrepareRetrieve(std::int64_t instance, const KeyArgs& key,
                                             std::string_view connection) {
    WireReply reply =
        MustSucceed(Ipc(connection), "prepare_retrieve", {KeyFrame(key), IntFrame(instance)});
    if (reply.error) return {};
    return SlotOffsets(Field(reply.Value().get(), "context"));
  }
  WireReply CommitRetrieve(const RequestContext& from, std::int64_t instance, const KeyArgs& key) {
    return Send(from, "commit_retrieve", {KeyFrame(key), IntFrame(instance)});
  }
  // A scheduler's lookup of `key`'s tokens under `request`: the chunks it
  // reports as hits. Its locks are released again (end_session), so the
  // lookup leaves the lock counts as they were.
  std::uint64_t LookupHits(const KeyArgs& key, const std::string& request) {
    KeyArgs scheduler = key;
    scheduler.worker_id.reset();
    scheduler.request_id = request;
    MustSucceed(Ipc("scheduler"), "lookup", {KeyFrame(scheduler), IntFrame(1)});
    const std::uint64_t hits =
        MustSucceed(Ipc("scheduler"), "query_prefetch_status", {StrFrame(request)})
            .Value()
            .get()
            .via.u64;
    MustSucceed(Ipc("scheduler"), "end_session", {StrFrame(request)});
    return hits;
  }
  bool Ping(const RequestContext& from, std::int64_t instance) {
    return MustSucceed(from, "ping", {IntFrame(instance)}).Value().get().via.boolean;
  }
  // A field of the stats operation's reply: stats()[section][name].
  std::uint64_t Stat(std::string_view section, std::string_view name) {
    WireReply reply = MustSucceed(Ipc("operator"), "stats", {});
    if (reply.error) return ~0ull;
    auto stats = reply.Value();
    return Field(Field(stats.get(), section), name).via.u64;
  }

  void Fill(std::uint64_t offset, std::uint8_t fill) {
    std::memset(h_.pool() + offset, fill, kObject);
  }
  bool Holds(std::uint64_t offset, std::uint8_t fill) {
    const std::byte* slot = h_.pool() + offset;
    for (std::uint64_t i = 0; i < kObject; ++i) {
      if (slot[i] != std::byte{fill}) return false;
    }
    return true;
  }

  testing::ServiceHarness& h() { return h_; }

 private:
  testing::ServiceHarness h_;
};

void ExpectDenied(const WireReply& reply, std::string_view what) {
  EXPECT_EQ(reply.code(), kPermissionDeniedCode)
      << what << ": expected PERMISSION_DENIED (105), got " << reply.code() << " "
      << reply.message();
}

// The connections that must not act for instance X (registered by "conn-x"):
// one with nothing registered, one that registered another instance (Y), a
// remote tcp peer, and a tcp peer on loopback.
struct Intruder {
  const char* name;
  RequestContext context;
};
std::vector<Intruder> Intruders() {
  return {{"unregistered ipc connection", Ipc("intruder")},
          {"instance Y's connection", Ipc("conn-y")},
          {"remote tcp peer", TcpRemote("tcp-remote")},
          {"loopback tcp peer", TcpLoopback("tcp-loopback")}};
}

constexpr std::int64_t kX = 7;
constexpr std::int64_t kY = 8;

class Issue7IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    s_.Register(kX, "conn-x");
    s_.Register(kY, "conn-y");
  }
  IdentityHarness s_;
};

// (a) Another connection's commit_store of X's prepared (and not yet fully
// written) store is refused; the chunks stay staged under X's write lease,
// lookups do not report them, and X's own commit still stores X's bytes.
TEST_F(Issue7IdentityTest, CommitStoreOfAnotherInstanceIsRefusedAndChangesNothing) {
  const KeyArgs k = Key(512, 2, 11, "w");
  const std::vector<std::uint64_t> slots = s_.PrepareStore(kX, k, "conn-x");
  ASSERT_EQ(slots.size(), 2u);
  s_.Fill(slots[0], 0x5a);  // X is half way through its copy
  s_.Fill(slots[1], 0x00);
  const std::uint64_t staging_bytes = s_.Stat("l1", "staging_bytes");
  ASSERT_EQ(s_.Stat("l1", "staging_objects"), 2u);
  ASSERT_EQ(s_.Stat("instances", "pending_writes"), 1u);

  for (const Intruder& intruder : Intruders()) {
    SCOPED_TRACE(intruder.name);
    const WireReply reply = s_.CommitStore(intruder.context, kX, k);
    ExpectDenied(reply, "commit_store of X");
    EXPECT_FALSE(reply.Value().get().via.boolean) << "commit_store's failure value is False";
    EXPECT_EQ(s_.Stat("l1", "staging_objects"), 2u);
    EXPECT_EQ(s_.Stat("l1", "staging_bytes"), staging_bytes);
    EXPECT_EQ(s_.Stat("l1", "resident_objects"), 0u) << "X's unwritten chunks were committed";
    EXPECT_EQ(s_.Stat("l1", "write_leases"), 1u);
    EXPECT_EQ(s_.Stat("instances", "pending_writes"), 1u);
    EXPECT_EQ(s_.LookupHits(k, "look-before"), 0u) << "lookup reports chunks X never committed";
  }
  EXPECT_TRUE(s_.Holds(slots[0], 0x5a));

  // X finishes its copy and commits: its commit is still pending and succeeds.
  s_.Fill(slots[1], 0x5a);
  const WireReply done = s_.CommitStore(Ipc("conn-x"), kX, k);
  ASSERT_FALSE(done.error) << done.message();
  EXPECT_TRUE(done.Value().get().via.boolean);
  EXPECT_EQ(s_.Stat("l1", "resident_objects"), 2u);
  EXPECT_EQ(s_.Stat("l1", "staging_objects"), 0u);
  EXPECT_EQ(s_.LookupHits(k, "look-after"), 2u);
  // What a reader gets is exactly what X wrote.
  const std::vector<std::uint64_t> read = s_.PrepareRetrieve(kY, k, "conn-y");
  ASSERT_EQ(read.size(), 2u);
  EXPECT_TRUE(s_.Holds(read[0], 0x5a));
  EXPECT_TRUE(s_.Holds(read[1], 0x5a));
  EXPECT_FALSE(s_.CommitRetrieve(Ipc("conn-y"), kY, k).error);
  EXPECT_EQ(s_.Stat("l1", "locked_objects"), 0u);
}

// (b) Another connection's commit_retrieve naming X (which would release X's
// read lease while X copies) is refused; X's lease holds (stats), eviction
// cannot take the objects, and X's own commit releases it.
TEST_F(Issue7IdentityTest, CommitRetrieveOfAnotherInstanceDoesNotReleaseItsLease) {
  const KeyArgs k = Key(512, 2, 12, "r");
  s_.Store(kX, k, 0x3c, "conn-x");
  ASSERT_EQ(s_.Stat("l1", "locked_objects"), 0u);
  const std::vector<std::uint64_t> slots = s_.PrepareRetrieve(kX, k, "conn-x");
  ASSERT_EQ(slots.size(), 2u);
  ASSERT_EQ(s_.Stat("l1", "locked_objects"), 2u);
  ASSERT_EQ(s_.Stat("l1", "read_leases"), 1u);
  ASSERT_EQ(s_.Stat("instances", "pending_reads"), 1u);

  for (const Intruder& intruder : Intruders()) {
    SCOPED_TRACE(intruder.name);
    const WireReply reply = s_.CommitRetrieve(intruder.context, kX, k);
    ExpectDenied(reply, "commit_retrieve of X");
    EXPECT_FALSE(reply.Value().get().via.boolean) << "commit_retrieve's failure value is False";
    EXPECT_EQ(s_.Stat("l1", "locked_objects"), 2u) << "X's read lease was released";
    EXPECT_EQ(s_.Stat("l1", "read_leases"), 1u);
    EXPECT_EQ(s_.Stat("instances", "pending_reads"), 1u);
  }
  // The lease still protects X's copy: nothing is evictable.
  EXPECT_EQ(s_.h().service().table().EvictLru(1ull << 30).objects, 0u);
  EXPECT_TRUE(s_.Holds(slots[0], 0x3c));
  EXPECT_TRUE(s_.Holds(slots[1], 0x3c));

  const WireReply done = s_.CommitRetrieve(Ipc("conn-x"), kX, k);
  ASSERT_FALSE(done.error) << done.message();
  EXPECT_TRUE(done.Value().get().via.boolean);
  EXPECT_EQ(s_.Stat("l1", "locked_objects"), 0u);
  EXPECT_EQ(s_.Stat("l1", "read_leases"), 0u);
  EXPECT_EQ(s_.Stat("instances", "pending_reads"), 0u);
}

// (c) Another connection's unregister of X is refused; X stays registered with
// its pending store and read lease, keeps working, and may unregister itself.
TEST_F(Issue7IdentityTest, UnregisterOfAnotherInstanceIsRefusedAndItStaysRegistered) {
  const KeyArgs stored = Key(256, 1, 13, "s");
  s_.Store(kX, stored, 0x21, "conn-x");
  ASSERT_EQ(s_.PrepareRetrieve(kX, stored, "conn-x").size(), 1u);  // X is reading
  const KeyArgs staged = Key(512, 2, 14, "w");
  const std::vector<std::uint64_t> slots = s_.PrepareStore(kX, staged, "conn-x");  // and writing
  ASSERT_EQ(slots.size(), 2u);
  ASSERT_EQ(s_.Stat("instances", "registered"), 2u);

  for (const Intruder& intruder : Intruders()) {
    SCOPED_TRACE(intruder.name);
    const WireReply reply =
        s_.Send(intruder.context, "unregister_kv_cache_engine_driven_context", {IntFrame(kX)});
    ExpectDenied(reply, "unregister of X");
    EXPECT_EQ(s_.Stat("instances", "registered"), 2u) << "X was unregistered";
    EXPECT_EQ(s_.Stat("instances", "pending_writes"), 1u);
    EXPECT_EQ(s_.Stat("instances", "pending_reads"), 1u);
    EXPECT_EQ(s_.Stat("l1", "staging_objects"), 2u);
    EXPECT_EQ(s_.Stat("l1", "locked_objects"), 1u + 2u);  // the read lease and the staged writes
    EXPECT_TRUE(s_.Ping(Ipc("conn-x"), kX)) << "X's own connection lost its registration";
  }
  // X carries on as if nothing happened.
  for (const std::uint64_t offset : slots) s_.Fill(offset, 0x22);
  const WireReply stored_reply = s_.CommitStore(Ipc("conn-x"), kX, staged);
  ASSERT_FALSE(stored_reply.error) << stored_reply.message();
  EXPECT_TRUE(stored_reply.Value().get().via.boolean);
  EXPECT_FALSE(s_.CommitRetrieve(Ipc("conn-x"), kX, stored).error);
  EXPECT_EQ(s_.Stat("l1", "locked_objects"), 0u);
  EXPECT_EQ(s_.LookupHits(staged, "look"), 2u);
  // Only X's own connection can unregister it.
  EXPECT_FALSE(
      s_.Send(Ipc("conn-x"), "unregister_kv_cache_engine_driven_context", {IntFrame(kX)}).error);
  EXPECT_EQ(s_.Stat("instances", "registered"), 1u);
  EXPECT_FALSE(s_.Ping(Ipc("conn-x"), kX));
}

// The other operations that name an instance (docs/security.md): another
// connection's prepare_store / prepare_retrieve as X are refused and take
// nothing, and its ping for X answers False without refreshing X.
TEST_F(Issue7IdentityTest, PreparesAndPingsNamingAnotherInstanceAreRefused) {
  const KeyArgs stored = Key(256, 1, 15, "s");
  s_.Store(kX, stored, 0x44, "conn-x");
  for (const Intruder& intruder : Intruders()) {
    SCOPED_TRACE(intruder.name);
    ExpectDenied(
        s_.Send(intruder.context, "prepare_store", {KeyFrame(Key(512, 2, 16, "w")), IntFrame(kX)}),
        "prepare_store as X");
    ExpectDenied(s_.Send(intruder.context, "prepare_retrieve", {KeyFrame(stored), IntFrame(kX)}),
                 "prepare_retrieve as X");
    EXPECT_FALSE(s_.Ping(intruder.context, kX));
    EXPECT_EQ(s_.Stat("l1", "staging_objects"), 0u);
    EXPECT_EQ(s_.Stat("l1", "locked_objects"), 0u);
    EXPECT_EQ(s_.Stat("instances", "pending_writes"), 0u);
    EXPECT_EQ(s_.Stat("instances", "pending_reads"), 0u);
  }
  EXPECT_TRUE(s_.Ping(Ipc("conn-x"), kX));
}

// (d) --admin-ops, parsed from the command line as lmcache-server does.
Result<ServiceConfig> AdminOpsFlag(std::vector<std::string> args) {
  LMC_ASSIGN_OR_RETURN(daemon::ServerConfig config, testing::ParseServerFlags(std::move(args), getpid()));
  return config.service;
}

class AdminOpsTest : public ::testing::Test {
 protected:
  // A fresh server started with `args`, with two committed chunks and nothing
  // locked (so a non-forced clear would remove both).
  void Start(std::vector<std::string> args) {
    Result<ServiceConfig> config = AdminOpsFlag(std::move(args));
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    s_.emplace(*config);
    s_->Register(1, "worker");
    Fill();
  }
  void Fill() {
    s_->Store(1, key_, 0x77, "worker");
    ASSERT_EQ(s_->Stat("l1", "resident_objects"), 2u);
    ASSERT_EQ(s_->Stat("l1", "locked_objects"), 0u);
  }
  // clear (and clear(force=1)) from `from` is refused and the cache is intact.
  void ExpectClearRefused(const RequestContext& from, std::string_view what) {
    SCOPED_TRACE(what);
    const std::uint64_t deleted = s_->Stat("l1", "deleted_objects");
    for (const bool force : {false, true}) {
      std::vector<std::string> frames;
      if (force) frames.push_back(IntFrame(1));
      const WireReply reply = s_->Send(from, "clear", frames);
      ExpectDenied(reply, force ? "clear(force)" : "clear");
      EXPECT_TRUE(reply.Value().get().is_nil()) << "clear's failure value is nil";
      EXPECT_EQ(s_->Stat("l1", "resident_objects"), 2u) << "the refused clear removed objects";
      EXPECT_EQ(s_->Stat("l1", "retired_objects"), 0u);
      EXPECT_EQ(s_->Stat("l1", "deleted_objects"), deleted);
    }
    EXPECT_EQ(s_->LookupHits(key_, "after-refused-clear"), 2u);
    const std::vector<std::uint64_t> slots = s_->PrepareRetrieve(1, key_, "worker");
    ASSERT_EQ(slots.size(), 2u);
    EXPECT_TRUE(s_->Holds(slots[0], 0x77));
    EXPECT_TRUE(s_->Holds(slots[1], 0x77));
    EXPECT_FALSE(s_->CommitRetrieve(Ipc("worker"), 1, key_).error);
    EXPECT_EQ(s_->Stat("l1", "locked_objects"), 0u);
  }
  // clear from `from` succeeds and empties the cache; then the cache is refilled.
  void ExpectClearAllowed(const RequestContext& from, std::string_view what) {
    SCOPED_TRACE(what);
    const WireReply reply = s_->Send(from, "clear", {});
    EXPECT_FALSE(reply.error) << reply.message();
    EXPECT_EQ(s_->Stat("l1", "resident_objects"), 0u);
    EXPECT_EQ(s_->LookupHits(key_, "after-clear"), 0u);
    Fill();
  }

  const KeyArgs key_ = Key(512, 2, 21, "s");
  std::optional<IdentityHarness> s_;
};

TEST_F(AdminOpsTest, OffRefusesClearFromEveryPeer) {
  Start({"--admin-ops", "off"});
  ExpectClearRefused(Ipc("operator"), "ipc");
  ExpectClearRefused(Inproc("operator"), "inproc");
  ExpectClearRefused(TcpLoopback("operator"), "tcp from loopback");
  ExpectClearRefused(TcpRemote("operator"), "tcp from a remote address");
  ExpectClearRefused(Ipc("worker"), "the worker's own ipc connection");
}

TEST_F(AdminOpsTest, LocalAllowsClearFromLocalPeersOnly) {
  Start({"--admin-ops", "local"});
  ExpectClearRefused(TcpRemote("operator"), "tcp from a remote address");
  ExpectClearAllowed(Ipc("operator"), "ipc");
  ExpectClearAllowed(Inproc("operator"), "inproc");
  ExpectClearAllowed(TcpLoopback("operator"), "tcp from loopback");
  ExpectClearRefused(TcpRemote("operator"), "tcp from a remote address, again");
}

// Issue 19: with the old default (local), a second Unix user (uid 999) sent
// clear(force) over tcp://127.0.0.1 and wiped another user's cache. The
// default now allows clear only where file permissions decide: ipc.
TEST_F(AdminOpsTest, TheDefaultAllowsClearOverIpcOnly) {
  Start({});
  ExpectClearRefused(TcpLoopback("another local user"), "tcp from loopback");
  ExpectClearRefused(TcpRemote("operator"), "tcp from a remote address");
  ExpectClearAllowed(Ipc("operator"), "ipc");
  ExpectClearAllowed(Inproc("operator"), "inproc");
}

TEST_F(AdminOpsTest, IpcAllowsClearOverIpcOnly) {
  Start({"--admin-ops", "ipc"});
  ExpectClearRefused(TcpLoopback("operator"), "tcp from loopback");
  ExpectClearAllowed(Ipc("operator"), "ipc");
}

TEST_F(AdminOpsTest, AnyAllowsClearFromARemotePeer) {
  Start({"--admin-ops", "any"});
  ExpectClearAllowed(TcpRemote("operator"), "tcp from a remote address");
  ExpectClearAllowed(Ipc("operator"), "ipc");
}

TEST(AdminOpsFlag, AnUnknownValueIsRejectedNamingTheFlag) {
  Result<ServiceConfig> config = AdminOpsFlag({"--admin-ops", "sometimes"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("--admin-ops"), std::string::npos)
      << config.status().message();
}

}  // namespace
}  // namespace lmcache::server
