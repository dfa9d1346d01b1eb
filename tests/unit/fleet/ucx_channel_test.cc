// UcxChannel between two channels of this process, through UCX's TCP
// transport (what two nodes without RDMA use) and through its default
// choice: bytes read land exactly; reads outside either pool are refused,
// here before any request and at the owner when the descriptor lied; a
// requester without the fleet's data key gets nothing; a dead peer or a
// missed deadline fails a batch without hanging it, and a late reply writes
// nothing.
#include "fleet/ucx_channel.h"
#include "fleet/ucx_wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "fakes/fake_clock.h"
#include "fakes/wait_until.h"
#include "unit/fleet/raw_ucx_worker.h"

namespace lmcache::fleet {
namespace {

constexpr std::size_t kPoolBytes = 8u << 20;
const FleetDataKey kKey = [] {
  FleetDataKey key;
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = static_cast<std::uint8_t>(i * 7 + 1);
  return key;
}();

// Byte i is (i * 131 + seed) mod 256, a pattern of period 256: one period
// is made and copied over the pool (the test code is unoptimised, and a
// loop over 8 MiB per pool was most of the test's time under ASan).
struct Pool {
  explicit Pool(std::uint8_t seed) : bytes(kPoolBytes) {
    std::array<std::byte, 256> period;
    for (std::size_t i = 0; i < period.size(); ++i) {
      period[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
    }
    for (std::size_t at = 0; at < bytes.size(); at += period.size()) {
      std::memcpy(bytes.data() + at, period.data(), period.size());
    }
  }
  std::vector<std::byte> bytes;
};

// Waits for a batch's status: the channel must answer every batch.
Status ReadAndWait(UcxChannel& channel, PeerHandle peer, std::vector<UcxRead> reads,
                   TimeMs deadline_ms = 1'000'000'000) {
  std::promise<Status> done;
  auto result = done.get_future();
  channel.Read(peer, std::move(reads), deadline_ms,
               [&done](Status status) { done.set_value(std::move(status)); });
  if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "a batch was not answered within 60 s";
    return Status(ErrorCode::kTimeout, "hung");
  }
  return result.get();
}

// Blocks `channel`'s progress thread (in a completion of a read of its own
// from `peer`) until `released`; returns once it is blocked.
void StallProgress(UcxChannel& channel, PeerHandle peer, std::shared_future<void> released) {
  std::promise<void> stalled;
  channel.Read(peer, {{0, 0, 64}}, 1'000'000'000, [&stalled, released](Status) {
    stalled.set_value();
    released.wait();
  });
  stalled.get_future().wait();
}

// Polls `done` until it holds; false after a bound that only catches a hang.

class UcxChannelTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "default") {
      unsetenv("UCX_TLS");
    } else {
      setenv("UCX_TLS", GetParam(), 1);
    }
  }
  void TearDown() override { unsetenv("UCX_TLS"); }

  // An owner and a requester wired both ways, the owner's progress thread
  // held (until `release`), and one read of the requester's waiting on it
  // (`result`) with the deadline given.
  struct StalledOwner {
    // Declared before the channels, so they outlive every completion.
    std::promise<void> release;
    std::promise<Status> done;
    std::future<Status> result;
    Pool owner_pool{7}, requester_pool{8};
    std::vector<std::byte> before;
    std::unique_ptr<UcxChannel> owner, requester;
    std::optional<PeerHandle> to_owner, to_requester;
    bool ready = false;
    ~StalledOwner() {
      try {
        release.set_value();  // a test that failed early: the owner's thread must not stay held
      } catch (const std::future_error&) {
      }
    }
  };
  void StartStalled(StalledOwner& s, TimeMs deadline_from_now) {
    s.owner = Make(s.owner_pool);
    s.requester = Make(s.requester_pool);
    ASSERT_TRUE(s.owner && s.requester);
    auto to_owner = s.requester->Connect(s.owner->Descriptor());
    auto to_requester = s.owner->Connect(s.requester->Descriptor());
    ASSERT_TRUE(to_owner.ok() && to_requester.ok());
    s.to_owner = *to_owner;
    s.to_requester = *to_requester;
    ASSERT_TRUE(ReadAndWait(*s.requester, *s.to_owner, {{0, 0, 4096}}).ok());  // both ways wired
    ASSERT_TRUE(ReadAndWait(*s.owner, *s.to_requester, {{0, 0, 64}}).ok());
    StallProgress(*s.owner, *s.to_requester, s.release.get_future().share());
    s.before = s.requester_pool.bytes;
    s.result = s.done.get_future();
    s.requester->Read(*s.to_owner, {{1 << 20, 1 << 20, 64 << 10}},
                      clock_.NowMs() + deadline_from_now,
                      [&s](Status status) { s.done.set_value(std::move(status)); });
    EXPECT_EQ(s.result.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
    s.ready = true;
  }

  // A channel that, as an owner, serves every range its guard allows (by
  // default any: these tests are about the transport; the server's guard
  // is PeerTasks::Holds, tested in peer_tasks_test).
  static bool AnyRange(std::int64_t, std::uint64_t, std::uint64_t) { return true; }
  std::unique_ptr<UcxChannel> Make(Pool& pool, const FleetDataKey& key = kKey,
                                   std::optional<ServeGuard> guard = ServeGuard(AnyRange)) {
    auto channel = UcxChannel::Create(pool.bytes.data(), pool.bytes.size(), &clock_, key);
    EXPECT_TRUE(channel.ok()) << channel.status().ToString();
    if (!channel.ok()) return nullptr;
    if (guard) (*channel)->SetServeGuard(std::move(*guard));
    return std::move(*channel);
  }

  testing::FakeClock clock_;
};

TEST_P(UcxChannelTest, ReadsLandByteForByteAtTheirOffsets) {
  Pool owner_pool(1), requester_pool(2);
  auto owner = Make(owner_pool);
  auto requester = Make(requester_pool);
  ASSERT_TRUE(owner && requester);
  // The descriptor crosses the wire as bytes.
  auto descriptor = UcxDescriptor::Parse(owner->Descriptor().Encode());
  ASSERT_TRUE(descriptor.ok()) << descriptor.status().ToString();
  EXPECT_EQ(descriptor->size, kPoolBytes);
  auto peer = requester->Connect(*descriptor);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  const std::vector<UcxRead> reads = {
      {0, 4096, 4096}, {1 << 20, 2 << 20, 3 << 20}, {kPoolBytes - 100, 100, 100}};
  ASSERT_TRUE(ReadAndWait(*requester, *peer, reads).ok());
  for (const UcxRead& r : reads) {
    const std::byte* landed = requester_pool.bytes.data() + r.local_offset;
    const std::byte* source = owner_pool.bytes.data() + r.remote_offset;
    ASSERT_EQ(std::memcmp(landed, source, r.size), 0)
        << "read at " << r.remote_offset << " differs from byte "
        << std::mismatch(landed, landed + r.size, source).first - landed;
  }
  // Bytes outside the reads are untouched.
  const Pool untouched(2);
  EXPECT_EQ(requester_pool.bytes[0], untouched.bytes[0]);
  EXPECT_EQ(requester_pool.bytes[4096 + 4096], untouched.bytes[4096 + 4096]);
  const UcxChannelStats stats = requester->Stats();
  EXPECT_EQ(stats.peers, 1u);
  EXPECT_EQ(stats.reads, 1u);
  EXPECT_EQ(stats.read_bytes, 4096u + (3u << 20) + 100u);
  EXPECT_EQ(owner->Stats().served_reads, 3u);
  EXPECT_EQ(owner->Stats().served_bytes, 4096u + (3u << 20) + 100u);
  requester->Disconnect(*peer);
}

TEST_P(UcxChannelTest, AReadOutsideEitherPoolIsRefusedBeforeAnyRequest) {
  Pool owner_pool(3), requester_pool(4);
  auto owner = Make(owner_pool);
  auto requester = Make(requester_pool);
  ASSERT_TRUE(owner && requester);
  auto peer = requester->Connect(owner->Descriptor());
  ASSERT_TRUE(peer.ok());
  const std::vector<std::byte> before = requester_pool.bytes;
  for (const UcxRead& bad : {UcxRead{kPoolBytes - 10, 0, 11}, UcxRead{0, kPoolBytes - 10, 11},
                             UcxRead{~0ull - 5, 0, 10}, UcxRead{0, 0, 0}}) {
    // A good read beside the bad one is not posted either.
    const Status status = ReadAndWait(*requester, *peer, {{0, 0, 4096}, bad});
    EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument) << status.ToString();
  }
  EXPECT_EQ(requester_pool.bytes, before);
  EXPECT_EQ(requester->Stats().refused_reads, 4u);
  // The peer is still good for reads inside the pools.
  EXPECT_TRUE(ReadAndWait(*requester, *peer, {{0, 0, 4096}}).ok());
  // Per read (ReadEach): a refused batch landed nothing, a good one all.
  auto each = [&](std::vector<UcxRead> reads) {
    std::promise<std::vector<bool>> landed;
    requester->ReadEach(*peer, std::move(reads), clock_.NowMs() + 60'000,
                        [&landed](Status, std::vector<bool> l) { landed.set_value(std::move(l)); });
    return landed.get_future().get();
  };
  EXPECT_EQ(each({{0, 0, 4096}, {kPoolBytes - 10, 0, 11}}), (std::vector<bool>{false, false}));
  EXPECT_EQ(each({{0, 0, 4096}, {4096, 8192, 100}}), (std::vector<bool>{true, true}));
}

TEST_P(UcxChannelTest, ADeadPeerOrAMissedDeadlineFailsTheBatchWithoutHangingIt) {
  Pool owner_pool(5), requester_pool(6);
  auto requester = Make(requester_pool);
  ASSERT_TRUE(requester);
  UcxDescriptor gone;
  {
    auto owner = Make(owner_pool);
    ASSERT_TRUE(owner);
    gone = owner->Descriptor();
  }  // the owner's worker is destroyed: its address leads nowhere
  auto peer = requester->Connect(gone);
  if (!peer.ok()) {  // refused at once: nothing can hang
    EXPECT_EQ(peer.status().code(), ErrorCode::kIoError);
    return;
  }
  std::promise<Status> done;
  auto result = done.get_future();
  requester->Read(*peer, {{0, 0, 1 << 20}}, clock_.NowMs() + 1000,
                  [&done](Status status) { done.set_value(std::move(status)); });
  // Past the deadline (the fake clock), the batch ends even if UCX has not
  // yet noticed the peer is gone.
  clock_.Advance(2000);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_FALSE(result.get().ok());
  EXPECT_EQ(requester->Stats().failed_reads, 1u);
  // The failed endpoint takes no more reads until connected anew.
  EXPECT_EQ(ReadAndWait(*requester, *peer, {{0, 0, 64}}).code(), ErrorCode::kUnavailable);
  requester->Disconnect(*peer);
}

// The owner's progress thread answers every read: an owner whose thread is
// held busy never answers, the batch ends at its deadline, and the reply the
// owner sends once it resumes is dropped: the slot is not written.
TEST_P(UcxChannelTest, ABatchFromAStalledOwnerEndsAtItsDeadlineAndItsLateReplyIsDropped) {
  StalledOwner s;
  StartStalled(s, 500);
  ASSERT_TRUE(s.ready);
  auto& requester = s.requester;
  auto& result = s.result;
  clock_.Advance(1000);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(result.get().code(), ErrorCode::kTimeout);
  EXPECT_EQ(requester->Stats().deadline_reads, 1u);
  s.release.set_value();
  // The owner answers now; the requester drops the answer.
  ASSERT_TRUE(testing::WaitUntil([&] { return requester->Stats().late_replies > 0; }));
  EXPECT_EQ(requester->Stats().late_replies, 1u);
  EXPECT_EQ(s.requester_pool.bytes, s.before);
}

// EndReads (a server shutting down): a batch waiting on a stalled owner ends
// now, not at its deadline, and no byte of it lands after its done; a later
// batch ends at once.
TEST_P(UcxChannelTest, EndReadsEndsABatchWaitingOnAStalledOwnerNowAndLaterOnesAtOnce) {
  StalledOwner s;
  StartStalled(s, 3'600'000);
  ASSERT_TRUE(s.ready);
  auto& requester = s.requester;
  auto& result = s.result;
  requester->EndReads();  // the fake clock stands still: only EndReads can end it
  ASSERT_EQ(result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_FALSE(result.get().ok());
  const std::uint64_t sent_before = requester->Stats().reads;
  EXPECT_FALSE(ReadAndWait(*requester, *s.to_owner, {{0, 0, 4096}}).ok());
  EXPECT_EQ(requester->Stats().reads, sent_before + 1);
  s.release.set_value();
  ASSERT_TRUE(testing::WaitUntil([&] { return requester->Stats().late_replies > 0; }));
  EXPECT_EQ(s.requester_pool.bytes, s.before);
}

// The owner answers a requester that has died meanwhile: its answer fails
// on its own, and the owner goes on serving (UCX's one-sided software get
// aborted the owner here: docs/architecture.md, "Where the fleet goes").
TEST_P(UcxChannelTest, AnOwnerSurvivesARequesterThatDiedBeforeItsAnswer) {
  Pool owner_pool(12), requester_pool(13), next_pool(14);
  auto owner = Make(owner_pool);
  ASSERT_TRUE(owner);
  auto requester = Make(requester_pool);
  auto to_owner = requester->Connect(owner->Descriptor());
  auto to_requester = owner->Connect(requester->Descriptor());
  ASSERT_TRUE(to_owner.ok() && to_requester.ok());
  ASSERT_TRUE(ReadAndWait(*owner, *to_requester, {{0, 0, 64}}).ok());
  std::promise<void> release;
  StallProgress(*owner, *to_requester, release.get_future().share());
  std::promise<Status> done;
  requester->Read(*to_owner, {{0, 0, 2 << 20}, {2 << 20, 2 << 20, 4096}}, clock_.NowMs() + 100,
                  [&done](Status status) { done.set_value(std::move(status)); });
  clock_.Advance(1000);
  EXPECT_FALSE(done.get_future().get().ok());
  requester.reset();  // gone before the owner answers
  release.set_value();
  owner->Disconnect(*to_requester);
  // The owner still serves a new requester: its progress thread has run past
  // the dead requester's queued requests (answered into the closed
  // connection, or, as seen with UCX_RNDV_THRESH=0, dropped by UCX with it),
  // so it survived them.
  auto next = Make(next_pool);
  auto peer = next->Connect(owner->Descriptor());
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(ReadAndWait(*next, *peer, {{0, 0, 1 << 20}}).ok());
  EXPECT_EQ(next_pool.bytes[4095], owner_pool.bytes[4095]);
}

// The fleet's data key gates every byte: a requester with another key is
// refused by the owner (and a request of ours that the owner sees outside
// its pool is refused there too, whatever the descriptor claimed).
TEST_P(UcxChannelTest, TheOwnerRefusesARequesterWithoutTheKeyAndRangesOutsideItsPool) {
  Pool owner_pool(9), requester_pool(10), stranger_pool(11);
  FleetDataKey other = kKey;
  other[0] ^= 1;
  auto owner = Make(owner_pool);
  auto requester = Make(requester_pool);
  auto stranger = Make(stranger_pool, other);
  ASSERT_TRUE(owner && requester && stranger);
  const std::vector<std::byte> stranger_before = stranger_pool.bytes;
  auto from_stranger = stranger->Connect(owner->Descriptor());
  ASSERT_TRUE(from_stranger.ok());
  // The owner refuses both reads; its refusals carry a MAC under the fleet
  // key, which the stranger cannot check: to it they are forged, and its
  // batch ends at its deadline with nothing landed.
  std::promise<Status> refused;
  stranger->Read(*from_stranger, {{0, 0, 4096}, {1 << 20, 1 << 20, 1 << 20}},
                 clock_.NowMs() + 1000, [&refused](Status s) { refused.set_value(std::move(s)); });
  ASSERT_TRUE(testing::WaitUntil([&] { return stranger->Stats().forged_replies == 2; }));
  clock_.Advance(2000);
  EXPECT_EQ(refused.get_future().get().code(), ErrorCode::kTimeout);
  EXPECT_EQ(stranger_pool.bytes, stranger_before);
  UcxDescriptor lying = owner->Descriptor();
  lying.size *= 2;
  auto peer = requester->Connect(lying);
  ASSERT_TRUE(peer.ok());
  const std::vector<std::byte> before = requester_pool.bytes;
  EXPECT_EQ(ReadAndWait(*requester, *peer, {{kPoolBytes, 0, 4096}}).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(requester_pool.bytes, before);
  EXPECT_EQ(owner->Stats().refused_serves, 3u);
  EXPECT_EQ(owner->Stats().served_reads, 0u);
}

// Each read names the owner's lookup task it goes through, and the owner
// serves it only when its guard says that task holds that object locked
// now: a read through a released lock (or a lock of the owner's previous
// life) is refused and lands nothing; a channel given no guard serves
// nothing at all.
TEST_P(UcxChannelTest, TheOwnerServesOnlyReadsItsGuardSaysTheirTaskHolds) {
  Pool owner_pool(12), requester_pool(13), unguarded_pool(14);
  std::vector<std::tuple<std::int64_t, std::uint64_t, std::uint64_t>> asked;
  std::mutex asked_mu;
  ServeGuard task_7_holds_the_first_mib = [&](std::int64_t task, std::uint64_t offset,
                                              std::uint64_t size) {
    std::lock_guard lock(asked_mu);
    asked.emplace_back(task, offset, size);
    return task == 7 && offset == 0 && size == (1u << 20);
  };
  auto owner = Make(owner_pool, kKey, task_7_holds_the_first_mib);
  auto unguarded = Make(unguarded_pool, kKey, std::nullopt);
  auto requester = Make(requester_pool);
  ASSERT_TRUE(owner && unguarded && requester);
  auto peer = requester->Connect(owner->Descriptor());
  ASSERT_TRUE(peer.ok());
  const std::vector<std::byte> before = requester_pool.bytes;
  EXPECT_EQ(ReadAndWait(*requester, *peer, {{0, 0, 1 << 20, 8}}).code(), ErrorCode::kNotFound);
  EXPECT_EQ(ReadAndWait(*requester, *peer, {{0, 0, 4096, 7}}).code(), ErrorCode::kNotFound);
  EXPECT_EQ(requester_pool.bytes, before);
  ASSERT_TRUE(ReadAndWait(*requester, *peer, {{0, 0, 1 << 20, 7}}).ok());
  EXPECT_TRUE(std::equal(requester_pool.bytes.begin(), requester_pool.bytes.begin() + (1 << 20),
                         owner_pool.bytes.begin()));
  {
    std::lock_guard lock(asked_mu);
    EXPECT_EQ(asked.size(), 3u);
    EXPECT_EQ(asked.front(), std::make_tuple(std::int64_t{8}, std::uint64_t{0}, std::uint64_t{1} << 20));
  }
  EXPECT_EQ(owner->Stats().unheld_serves, 2u);
  EXPECT_EQ(owner->Stats().refused_serves, 0u);
  EXPECT_EQ(owner->Stats().served_reads, 1u);
  auto to_unguarded = requester->Connect(unguarded->Descriptor());
  ASSERT_TRUE(to_unguarded.ok());
  EXPECT_EQ(ReadAndWait(*requester, *to_unguarded, {{0, 0, 4096, 7}}).code(), ErrorCode::kNotFound);
  EXPECT_EQ(unguarded->Stats().served_reads, 0u);
}

// A host without the fleet key that knows only the requester's worker
// address sprays answers to the read ids it guesses while the owner is
// slow: none of its bytes lands, and the batch still gets the owner's.
// (On the channel before issue 62, whose ids counted up from 1 and whose
// replies carried no MAC, the batch landed the attacker's bytes.)
TEST_P(UcxChannelTest, AnswersSprayedByAHostWithoutTheKeyNeverLand) {
  StalledOwner s;
  StartStalled(s, 3'600'000);
  ASSERT_TRUE(s.ready);
  testing::RawUcxWorker attacker;
  ucp_ep_h ep = attacker.Connect(s.requester->Descriptor().worker_address);
  const std::vector<std::uint8_t> poison(64 << 10, 0xab);
  for (std::uint64_t guess = 1; guess <= 64; ++guess) {
    ReadReply reply;  // the id it guesses, status 0 ("the bytes follow"), no valid MAC
    std::memcpy(reply.id.data(), &guess, sizeof(guess));
    reply.size = poison.size();
    reply.flags = kHasDigest;
    attacker.Send(ep, kReadReplyId, &reply, sizeof(reply), poison.data(), poison.size(),
                  /*offer_reply_ep=*/true);
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return s.requester->Stats().forged_replies >= 64; }));
  EXPECT_EQ(s.result.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  s.release.set_value();
  ASSERT_EQ(s.result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const Status status = s.result.get();
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(std::equal(s.requester_pool.bytes.begin() + (1 << 20),
                         s.requester_pool.bytes.begin() + (1 << 20) + (64 << 10),
                         s.owner_pool.bytes.begin() + (1 << 20)))
      << "the requester's slot holds bytes its owner did not send";
  EXPECT_EQ(s.requester->Stats().forged_replies, 64u);
}

// A party the requester sent its read to (a raw UCX worker playing the
// owner) answers it in each way a liar could. Sizes: one eager, one by
// rendezvous.
class LyingOwnerTest : public UcxChannelTest {
 protected:
  struct Setup {
    Pool requester_pool{21};
    std::vector<std::byte> before;
    std::unique_ptr<UcxChannel> requester;
    testing::RawUcxWorker owner;
    PeerHandle to_owner = 0;
    std::promise<Status> done;
    std::future<Status> result;
    testing::RawUcxWorker::Received request;
    ReadRequest asked;
  };
  // The requester reads `size` bytes from the raw owner; returns once the
  // owner holds the request.
  void Ask(Setup& s, std::uint64_t size) {
    s.requester = Make(s.requester_pool);
    ASSERT_TRUE(s.requester);
    s.owner.Listen(kReadRequestId);
    UcxDescriptor descriptor;
    descriptor.worker_address = s.owner.Address();
    descriptor.size = kPoolBytes;
    auto peer = s.requester->Connect(descriptor);
    ASSERT_TRUE(peer.ok());
    s.to_owner = *peer;
    s.before = s.requester_pool.bytes;
    s.result = s.done.get_future();
    s.requester->Read(s.to_owner, {{0, 4096, size}}, clock_.NowMs() + 1000,
                      [&s](Status status) { s.done.set_value(std::move(status)); });
    ASSERT_TRUE(s.owner.NextMessage(&s.request));
    ASSERT_EQ(s.request.header.size(), sizeof(ReadRequest));
    ASSERT_NE(s.request.reply_ep, nullptr);
    std::memcpy(&s.asked, s.request.header.data(), sizeof(ReadRequest));
    EXPECT_TRUE(RequestSigned(DataChannelKeys::From(kKey), s.asked));
    EXPECT_EQ(s.asked.flags, kWantDigest);
  }
  // A reply to `s.asked` with `bytes`, signed under `key`.
  static ReadReply Answer(const Setup& s, const std::vector<std::byte>& bytes,
                          const FleetDataKey& key = kKey) {
    ReadReply reply;
    reply.id = s.asked.id;
    reply.size = bytes.size();
    reply.flags = kHasDigest;
    SignReply(DataChannelKeys::From(key), bytes, &reply);
    return reply;
  }
  void Send(Setup& s, ucp_ep_h ep, const ReadReply& reply, const std::vector<std::byte>& bytes) {
    s.owner.Send(ep, kReadReplyId, &reply, sizeof(reply), bytes.data(), bytes.size(),
                 /*offer_reply_ep=*/true);
  }
  // The read is still waiting: nothing the liar sent ended it.
  void ExpectStillWaiting(Setup& s) {
    s.owner.Progress(std::chrono::milliseconds(200));
    EXPECT_EQ(s.result.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
    EXPECT_EQ(s.requester_pool.bytes, s.before);
  }
};

TEST_P(LyingOwnerTest, AReplySignedWithAnotherKeyIsDroppedAndTheReadTimesOut) {
  for (std::uint64_t size : {std::uint64_t{256}, std::uint64_t{1} << 20}) {
    Setup s;
    Ask(s, size);
    const std::vector<std::byte> poison(size, std::byte{0xab});
    FleetDataKey other = kKey;
    other[5] ^= 1;
    Send(s, s.request.reply_ep, Answer(s, poison, other), poison);
    ASSERT_TRUE(testing::WaitUntil([&] { return s.requester->Stats().forged_replies == 1; }));
    ExpectStillWaiting(s);
    clock_.Advance(2000);
    ASSERT_EQ(s.result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    EXPECT_EQ(s.result.get().code(), ErrorCode::kTimeout);
    EXPECT_EQ(s.requester_pool.bytes, s.before) << size << " bytes";
  }
}

TEST_P(LyingOwnerTest, AMembersReplyOnAnotherEndpointIsDroppedAndTheOwnersLands) {
  for (std::uint64_t size : {std::uint64_t{256}, std::uint64_t{1} << 20}) {
    Setup s;
    Ask(s, size);
    std::vector<std::byte> good(size);
    for (std::size_t i = 0; i < good.size(); ++i) good[i] = static_cast<std::byte>(i * 31 + 5);
    const ReadReply reply = Answer(s, good);
    // The same valid reply, from a member that is not the read's owner: it
    // knows the key (and here even the id), but its endpoint is its own.
    testing::RawUcxWorker other_member;
    other_member.Send(other_member.Connect(s.requester->Descriptor().worker_address),
                      kReadReplyId, &reply, sizeof(reply), good.data(), good.size(),
                      /*offer_reply_ep=*/true);
    ASSERT_TRUE(testing::WaitUntil([&] { return s.requester->Stats().foreign_replies == 1; }));
    ExpectStillWaiting(s);
    // Without a reply endpoint at all, the same.
    s.owner.Send(s.request.reply_ep, kReadReplyId, &reply, sizeof(reply), good.data(),
                 good.size(), /*offer_reply_ep=*/false);
    ASSERT_TRUE(testing::WaitUntil([&] { return s.requester->Stats().foreign_replies == 2; }));
    ExpectStillWaiting(s);
    // The owner's own reply, on the endpoint the read went to, lands.
    Send(s, s.request.reply_ep, reply, good);
    ASSERT_EQ(s.result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    ASSERT_TRUE(s.result.get().ok()) << size << " bytes";
    EXPECT_TRUE(std::equal(good.begin(), good.end(), s.requester_pool.bytes.begin() + 4096));
  }
}

TEST_P(LyingOwnerTest, BytesThatDoNotMatchTheDigestFailTheRead) {
  for (std::uint64_t size : {std::uint64_t{256}, std::uint64_t{1} << 20}) {
    Setup s;
    Ask(s, size);
    std::vector<std::byte> digested(size, std::byte{1});
    std::vector<std::byte> sent = digested;
    sent[size / 2] = std::byte{2};  // one byte changed after the digest
    Send(s, s.request.reply_ep, Answer(s, digested), sent);
    ASSERT_EQ(s.result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    EXPECT_EQ(s.result.get().code(), ErrorCode::kCorrupt) << size << " bytes";
    EXPECT_EQ(s.requester->Stats().corrupt_replies, 1u);
    EXPECT_EQ(s.requester->Stats().failed_reads, 1u);
  }
  // A reply that carries no digest when one was asked for fails too.
  Setup s;
  Ask(s, 256);
  const std::vector<std::byte> bytes(256, std::byte{3});
  ReadReply bare;
  bare.id = s.asked.id;
  bare.size = bytes.size();
  SignReply(DataChannelKeys::From(kKey), bytes, &bare);
  Send(s, s.request.reply_ep, bare, bytes);
  ASSERT_EQ(s.result.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(s.result.get().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(s.requester_pool.bytes, s.before);
}

// Without digests (--p2p-verify-bytes false) reads still land, the owner
// sends none, and headers are still authenticated.
TEST_P(UcxChannelTest, AChannelWithoutDigestsStillReadsAndStillChecksHeaders) {
  Pool owner_pool(31), requester_pool(32);
  auto owner = Make(owner_pool);
  auto made = UcxChannel::Create(requester_pool.bytes.data(), requester_pool.bytes.size(),
                                 &clock_, kKey, {.verify_bytes = false});
  ASSERT_TRUE(made.ok());
  auto& requester = *made;
  auto peer = requester->Connect(owner->Descriptor());
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(ReadAndWait(*requester, *peer, {{0, 0, 1 << 20}, {0, 2 << 20, 100}}).ok());
  EXPECT_TRUE(std::equal(requester_pool.bytes.begin(), requester_pool.bytes.begin() + (1 << 20),
                         owner_pool.bytes.begin()));
  EXPECT_EQ(requester->Stats().corrupt_replies, 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, LyingOwnerTest, ::testing::Values("tcp", "default"),
                         [](const auto& param_info) { return std::string(param_info.param); });

INSTANTIATE_TEST_SUITE_P(Transports, UcxChannelTest, ::testing::Values("tcp", "default"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace lmcache::fleet
