// KvEventStreams with a real KV event log and a recording `emit` in place of
// the transport: the reference's subscribe_kv_events semantics
// (lmcache/v1/multiprocess/modules/kv_events.py, KVEventModule: a status
// batch at once, then one batch per credit when the model has records or
// a loss, one stream per worker instance, a disabled channel ends after its
// status batch) and ours (ends on cancel, on the connection's close and on
// drain; limits; nothing is sent after the end).
#include "server/kv_event_streams.h"
#include "fakes/wait_until.h"

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace lmcache::server {
namespace {

using namespace std::chrono_literals;
using testing::WaitUntil;

// The decoded part of a KVEventBatch that the tests look at.
struct Batch {
  bool enabled = false;
  std::uint64_t next_cursor = 0;
  bool lost = false;
  std::vector<std::uint64_t> seqs;
};

Batch DecodeBatch(const std::string& bytes) {
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  Batch batch;
  for (const auto& kv : handle.get().via.map) {
    const std::string key = kv.key.as<std::string>();
    if (key == "enabled") batch.enabled = kv.val.as<bool>();
    if (key == "next_cursor") batch.next_cursor = kv.val.as<std::uint64_t>();
    if (key == "lost") batch.lost = kv.val.as<bool>();
    if (key != "events") continue;
    for (const auto& record : kv.val.via.array) {
      for (const auto& field : record.via.map) {
        if (field.key.as<std::string>() == "seq")
          batch.seqs.push_back(field.val.as<std::uint64_t>());
      }
    }
  }
  return batch;
}

// What one stream sent, as the transport would have: items, then one end
// (the end marker, or a failure through respond).
class Recorder {
 public:
  ReplyFn Emit() {
    return [this](ReplyFrames frames) {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_) after_end_ = true;
      if (frames.kind == ReplyKind::kStreamItem) {
        items_.push_back(DecodeBatch(frames.value));
      } else {
        ended_ = true;
      }
      cv_.notify_all();
    };
  }
  Respond Fail() {
    return [this](OpResult result) {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_) after_end_ = true;
      ended_ = true;
      failure_ = result.status();
      cv_.notify_all();
    };
  }
  // Waits until `n` items arrived (or 60 s: only a hang guard, callers
  // assert the result).
  bool WaitItems(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 60s, [&] { return items_.size() >= n; });
  }
  bool WaitEnd() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 60s, [&] { return ended_; });
  }
  std::vector<Batch> items() {
    std::lock_guard<std::mutex> lock(mu_);
    return items_;
  }
  bool ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  bool sent_after_end() {
    std::lock_guard<std::mutex> lock(mu_);
    return after_end_;
  }
  Status failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Batch> items_;
  bool ended_ = false;
  bool after_end_ = false;
  Status failure_;
};

events::KvEvent Stored(const std::string& model, std::uint8_t tag) {
  events::KvEvent event;
  event.kind = events::KvEventKind::kStored;
  event.medium = std::string(events::kMediumCpu);
  event.model_name = model;
  store::ChunkHash hash{};
  hash[0] = tag;
  event.block_hashes.push_back(hash);
  return event;
}

void Append(events::KvEvents& events, const std::string& model, std::uint8_t tag) {
  std::vector<events::KvEvent> one;
  one.push_back(Stored(model, tag));
  events.log().Append(std::move(one));
}

class KvEventStreamsTest : public ::testing::Test {
 protected:
  RequestContext Context(std::string_view connection, std::string_view uid) {
    RequestContext context;
    context.connection = connection;
    context.uid = uid;
    return context;
  }
  void Open(KvEventStreams& streams, Recorder& recorder, std::string_view connection,
            std::string_view uid, std::int64_t instance, std::int64_t cursor = 0,
            std::int64_t max_events = 16, const std::string& model = "m") {
    streams.Open(Context(connection, uid), {instance, model, cursor, max_events}, recorder.Emit(),
                 recorder.Fail());
  }

  events::KvEvents events_{events::KvEventsConfig{}, store::ChunkSizes(256), /*incarnation=*/42};
};

TEST_F(KvEventStreamsTest, TheStatusBatchGoesOutAtOnceThenOneBatchPerCredit) {
  Recorder r;
  KvEventStreams streams(&events_);
  Open(streams, r, "c", "u1", 7);
  ASSERT_EQ(r.items().size(), 1u) << "the status batch is sent before Open returns";
  EXPECT_TRUE(r.items()[0].enabled);
  EXPECT_TRUE(r.items()[0].seqs.empty());
  EXPECT_TRUE(events_.log().recording()) << "a subscriber is a reader: recording starts";

  // Records without a credit wait.
  Append(events_, "m", 1);
  Append(events_, "m", 2);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(r.items().size(), 1u) << "a batch went out without an ack";

  streams.Control("c", "u1", StreamSignal::kAck);
  ASSERT_TRUE(r.WaitItems(2));
  EXPECT_EQ(r.items()[1].seqs, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(r.items()[1].next_cursor, 2u);

  // With a credit and nothing new, nothing goes out until a record lands.
  streams.Control("c", "u1", StreamSignal::kAck);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(r.items().size(), 2u) << "an empty batch was sent";
  Append(events_, "other-model", 3);  // advances the cursor, sends nothing
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(r.items().size(), 2u);
  Append(events_, "m", 4);
  ASSERT_TRUE(r.WaitItems(3));
  EXPECT_EQ(r.items()[2].seqs, (std::vector<std::uint64_t>{4}));
  EXPECT_FALSE(r.ended());
  EXPECT_EQ(streams.Stats().open, 1u);
  EXPECT_EQ(streams.Stats().batches, 3u);
}

TEST_F(KvEventStreamsTest, ACancelEndsTheStreamAndLaterControlsAreStale) {
  Recorder r;
  KvEventStreams streams(&events_);
  Open(streams, r, "c", "u1", 7);
  streams.Control("c", "u1", StreamSignal::kCancel);
  ASSERT_TRUE(r.WaitEnd());
  WaitUntil([&] { return streams.Stats().open == 0; });
  EXPECT_EQ(streams.Stats().open, 0u);
  streams.Control("c", "u1", StreamSignal::kAck);  // an ack racing the end marker
  Append(events_, "m", 1);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(streams.Stats().stale_controls, 1u);
  EXPECT_FALSE(r.sent_after_end());
  EXPECT_TRUE(r.failure().ok()) << "a cancel ends with the end marker, not a failure";
}

TEST_F(KvEventStreamsTest, ANewerSubscriptionOfTheSameInstanceEndsTheOlder) {
  Recorder older, newer, other;
  KvEventStreams streams(&events_);
  Open(streams, older, "c1", "u1", 7);
  Open(streams, other, "c1", "u2", 8);
  Open(streams, newer, "c2", "u1", 7);  // the worker reconnected
  ASSERT_TRUE(older.WaitEnd());
  EXPECT_FALSE(newer.ended());
  EXPECT_FALSE(other.ended());
  Append(events_, "m", 1);
  streams.Control("c2", "u1", StreamSignal::kAck);
  ASSERT_TRUE(newer.WaitItems(2));
  EXPECT_EQ(older.items().size(), 1u);
}

TEST_F(KvEventStreamsTest, AClosedConnectionEndsItsStreamsOnly) {
  Recorder a1, a2, b;
  KvEventStreams streams(&events_);
  Open(streams, a1, "a", "1", 1);
  Open(streams, a2, "a", "2", 2);
  Open(streams, b, "b", "1", 3);
  streams.CloseConnection("a");
  ASSERT_TRUE(a1.WaitEnd());
  ASSERT_TRUE(a2.WaitEnd());
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(b.ended());
  WaitUntil([&] { return streams.Stats().open == 1; });
  EXPECT_EQ(streams.Stats().open, 1u);
}

TEST_F(KvEventStreamsTest, AReaderThatFellBehindIsToldItLostRecords) {
  events::KvEventsConfig config;
  config.log.max_events = 4;
  events::KvEvents small(config, store::ChunkSizes(256), 42);
  Recorder r;
  KvEventStreams streams(&small);
  Open(streams, r, "c", "u", 1);
  for (std::uint8_t i = 1; i <= 10; ++i) Append(small, "m", i);  // 1..6 fall out
  streams.Control("c", "u", StreamSignal::kAck);
  ASSERT_TRUE(r.WaitItems(2));
  EXPECT_TRUE(r.items()[1].lost);
  EXPECT_EQ(r.items()[1].seqs, (std::vector<std::uint64_t>{7, 8, 9, 10}));
}

TEST_F(KvEventStreamsTest, ADisabledChannelSendsItsStatusBatchThenEnds) {
  events::KvEventsConfig off;
  off.log.max_events = 0;
  events::KvEvents disabled(off, store::ChunkSizes(256), 42);
  Recorder r;
  KvEventStreams streams(&disabled);
  Open(streams, r, "c", "u", 1);
  ASSERT_EQ(r.items().size(), 1u);
  EXPECT_FALSE(r.items()[0].enabled);
  EXPECT_FALSE(r.ended());
  streams.Control("c", "u", StreamSignal::kAck);
  ASSERT_TRUE(r.WaitEnd());
  EXPECT_EQ(r.items().size(), 1u);

  Recorder n;
  KvEventStreams without(nullptr);  // a service built without the channel
  Open(without, n, "c", "u", 1);
  ASSERT_EQ(n.items().size(), 1u);
  EXPECT_FALSE(n.items()[0].enabled);
}

TEST_F(KvEventStreamsTest, BadArgumentsAndLimitsAreRefusedWithoutOpening) {
  Recorder ok1, ok2, dup, over, ok3, over_total;
  KvEventStreams streams(&events_, {/*per_connection=*/2, /*total=*/3});
  struct Case {
    std::int64_t cursor, max_events;
  };
  for (const Case c : {Case{-1, 16}, Case{0, 0}, Case{0, 1025}}) {
    Recorder r;
    Open(streams, r, "c", "bad", 1, c.cursor, c.max_events);
    EXPECT_EQ(r.failure().code(), ErrorCode::kInvalidArgument) << c.cursor << "/" << c.max_events;
    EXPECT_TRUE(r.items().empty());
  }
  Open(streams, ok1, "c", "1", 1);
  Open(streams, dup, "c", "1", 2);
  EXPECT_EQ(dup.failure().code(), ErrorCode::kInvalidArgument) << "a uid already streaming";
  Open(streams, ok2, "c", "2", 2);
  Open(streams, over, "c", "3", 3);
  EXPECT_EQ(over.failure().code(), ErrorCode::kResourceExhausted);
  Open(streams, ok3, "d", "1", 4);
  Open(streams, over_total, "e", "1", 5);
  EXPECT_EQ(over_total.failure().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(streams.Stats().open, 3u);
}

// A subscription read after its connection's close (still queued in the
// socket) would never see the close: it is refused, not left open forever.
TEST_F(KvEventStreamsTest, ASubscriptionReadAfterItsConnectionClosedIsNotOpened) {
  Recorder r;
  KvEventStreams streams(&events_);
  RequestContext late = Context("gone", "1");
  late.connection_closed = true;
  streams.Open(late, {1, "m", 0, 16}, r.Emit(), r.Fail());
  EXPECT_EQ(r.failure().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(r.items().empty());
  EXPECT_EQ(streams.Stats().open, 0u);
}

TEST_F(KvEventStreamsTest, DrainEndsEveryStreamAndRefusesNewOnes) {
  Recorder a, b, late;
  KvEventStreams streams(&events_);
  Open(streams, a, "c", "1", 1);
  Open(streams, b, "c", "2", 2);
  streams.Control("c", "1", StreamSignal::kAck);
  streams.Drain();
  EXPECT_TRUE(a.ended());
  EXPECT_TRUE(b.ended());
  Open(streams, late, "c", "3", 3);
  EXPECT_EQ(late.failure().code(), ErrorCode::kUnavailable);
  Append(events_, "m", 1);  // no watcher left
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(a.sent_after_end());
  streams.Drain();  // idempotent
}

// Appends from several threads while the stream acks as fast as batches
// come: every record reaches it once, in order.
TEST_F(KvEventStreamsTest, EveryRecordArrivesOnceInOrderUnderConcurrentAppends) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::uint64_t> seen;
  bool ended = false;
  ReplyFn emit;
  emit = [&](ReplyFrames frames) {
    std::lock_guard<std::mutex> lock(mu);
    if (frames.kind != ReplyKind::kStreamItem) {
      ended = true;
    } else {
      for (std::uint64_t seq : DecodeBatch(frames.value).seqs) seen.push_back(seq);
    }
    cv.notify_all();
  };
  std::atomic<std::size_t> batches{0};
  KvEventStreams streams(&events_);  // after what its emit uses: its end is sent on destruction
  streams.Open(
      Context("c", "u"), {1, "m", 0, 5},
      [&](ReplyFrames frames) {
        batches.fetch_add(1);
        emit(std::move(frames));
      },
      [](OpResult) { FAIL() << "refused"; });
  constexpr int kThreads = 4, kEach = 250;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) Append(events_, "m", 1);
    });
  }
  std::thread acker([&] {
    std::size_t acked = 0;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, 10ms);
      if (seen.size() >= kThreads * kEach) return;
      if (batches.load() > acked) {
        acked = batches.load();
        lock.unlock();
        streams.Control("c", "u", StreamSignal::kAck);
      }
    }
  });
  for (auto& w : writers) w.join();
  acker.join();
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kThreads * kEach));
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i + 1);
  EXPECT_FALSE(ended);
}

}  // namespace
}  // namespace lmcache::server
