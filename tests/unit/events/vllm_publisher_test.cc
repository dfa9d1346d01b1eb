// VllmEventPublisher: a ZMQ SUB socket decoding vLLM's frames ([topic,
// 8-byte big-endian seq, KVEventBatch]) sees the log's events in order, one
// message per model under a {model} topic, AllBlocksCleared when the log
// dropped what it had not sent, and the replay socket answers as vLLM's.
#include "events/vllm_publisher.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "fakes/temp_dir.h"

namespace lmcache::events {
namespace {

// The publisher's ZMQ sockets leave their socket files behind (ZMQ replaces a
// stale one at the next bind): the tests bind in a private directory that is
// removed when the test binary ends, instead of littering /tmp.
std::string TempIpc(const std::string& name) {
  static const testing::TempDir dir("lmc-pub");
  EXPECT_FALSE(dir.path().empty()) << "mkdtemp failed";
  return "ipc://" + (dir.path() / name).string();
}

KvEvent Removed(const std::string& model, std::uint8_t tag) {
  KvEvent event;
  event.kind = KvEventKind::kRemoved;
  event.medium = "CPU";
  event.model_name = model;
  event.block_hashes.push_back(store::ChunkHash{});
  event.block_hashes[0][31] = tag;
  return event;
}

void Append(KvEventLog& log, KvEvent event) {
  std::vector<KvEvent> events;
  events.push_back(std::move(event));
  log.Append(std::move(events));
}

struct Message {
  std::string topic;
  std::uint64_t seq = 0;
  std::vector<std::string> types;
  std::vector<std::uint64_t> hashes;
};

std::optional<Message> Receive(zmq::socket_t& sub) {
  std::vector<zmq::message_t> frames;
  zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(5000)) == 0) return std::nullopt;
  (void)zmq::recv_multipart(sub, std::back_inserter(frames));
  EXPECT_EQ(frames.size(), 3u);
  Message m;
  m.topic = frames[0].to_string();
  EXPECT_EQ(frames[1].size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) m.seq = (m.seq << 8) | static_cast<std::uint8_t>(frames[1].data<char>()[i]);
  msgpack::object_handle handle = msgpack::unpack(frames[2].data<char>(), frames[2].size());
  const msgpack::object& batch = handle.get();
  EXPECT_EQ(batch.via.array.size, 3u);
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  const msgpack::object& events = batch.via.array.ptr[1];
  for (std::uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack::object& event = events.via.array.ptr[i];
    for (std::uint32_t k = 0; k < event.via.map.size; ++k) {
      const std::string key = event.via.map.ptr[k].key.as<std::string>();
      if (key == "type") m.types.push_back(event.via.map.ptr[k].val.as<std::string>());
      if (key == "block_hashes") m.hashes.push_back(event.via.map.ptr[k].val.via.array.ptr[0].as<std::uint64_t>());
    }
  }
  return m;
}

zmq::socket_t Subscribe(zmq::context_t& context, const std::string& endpoint,
                        KvEventLog& log) {
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(endpoint);
  // A SUB socket misses what was sent before its subscription arrived: wait
  // until a probe event gets through, then read it away.
  for (int i = 0; i < 100; ++i) {
    Append(log, Removed("probe", 0));
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(50)) > 0) break;
  }
  while (true) {
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(200)) == 0) break;
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(sub, std::back_inserter(frames));
  }
  return sub;
}

TEST(VllmEventPublisher, PublishesTheLogInOrderWithConsecutiveSeqs) {
  KvEventLog log({}, 1);
  VllmPublisherConfig config;
  config.endpoint = TempIpc("order");
  auto publisher = VllmEventPublisher::Start(config, &log);
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  zmq::context_t context;
  zmq::socket_t sub = Subscribe(context, config.endpoint, log);
  std::uint64_t last_seq = 0;
  bool first = true;
  std::vector<std::uint64_t> seen;
  for (std::uint8_t i = 1; i <= 20; ++i) Append(log, Removed("m", i));
  while (seen.size() < 20) {
    auto m = Receive(sub);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->topic, "");
    if (!first) {
      EXPECT_EQ(m->seq, last_seq + 1);
    }
    first = false;
    last_seq = m->seq;
    for (std::size_t k = 0; k < m->types.size(); ++k) {
      EXPECT_EQ(m->types[k], "BlockRemoved");
      seen.push_back(m->hashes[k]);
    }
  }
  for (std::uint64_t i = 0; i < 20; ++i) EXPECT_EQ(seen[i], i + 1);
}

TEST(VllmEventPublisher, AModelTopicSplitsBatchesPerModel) {
  KvEventLog log({}, 1);
  VllmPublisherConfig config;
  config.endpoint = TempIpc("topic");
  config.topic = "kv@pod-1@{model}";
  auto publisher = VllmEventPublisher::Start(config, &log);
  ASSERT_TRUE(publisher.ok());
  zmq::context_t context;
  zmq::socket_t sub = Subscribe(context, config.endpoint, log);
  std::vector<KvEvent> events;
  events.push_back(Removed("llama", 1));
  events.push_back(Removed("qwen", 2));
  log.Append(std::move(events));
  std::map<std::string, std::uint64_t> by_topic;
  for (int i = 0; i < 2; ++i) {
    auto m = Receive(sub);
    ASSERT_TRUE(m);
    by_topic[m->topic] = m->hashes.at(0);
  }
  EXPECT_EQ(by_topic["kv@pod-1@llama"], 1u);
  EXPECT_EQ(by_topic["kv@pod-1@qwen"], 2u);
}

TEST(VllmEventPublisher, ReplaysBufferedMessagesThenTheEndMarker) {
  KvEventLog log({}, 1);
  VllmPublisherConfig config;
  config.endpoint = TempIpc("replay-pub");
  config.replay_endpoint = TempIpc("replay");
  auto publisher = VllmEventPublisher::Start(config, &log);
  ASSERT_TRUE(publisher.ok());
  zmq::context_t context;
  zmq::socket_t sub = Subscribe(context, config.endpoint, log);
  for (std::uint8_t i = 1; i <= 3; ++i) Append(log, Removed("m", i));
  std::vector<std::uint64_t> live;
  while (live.size() < 3) {
    auto m = Receive(sub);
    ASSERT_TRUE(m);
    live.insert(live.end(), m->hashes.begin(), m->hashes.end());
  }
  // Dynamo replays through a DEALER, sending [b"", start_seq]; from 0: all.
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.connect(config.replay_endpoint);
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(std::string(8, '\0')), zmq::send_flags::none);
  std::vector<std::uint64_t> seqs;
  std::vector<std::uint64_t> replayed_hashes;
  while (true) {
    std::vector<zmq::message_t> frames;
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_GT(zmq::poll(&item, 1, std::chrono::milliseconds(5000)), 0);
    (void)zmq::recv_multipart(dealer, std::back_inserter(frames));
    ASSERT_EQ(frames.size(), 4u);  // b"", topic, seq, payload
    EXPECT_EQ(frames[0].size(), 0u);
    if (frames[3].size() == 0) {
      EXPECT_EQ(frames[2].to_string(), std::string(8, '\xff'));
      break;
    }
    std::uint64_t seq = 0;
    for (std::size_t i = 0; i < 8; ++i) seq = (seq << 8) | frames[2].data<std::uint8_t>()[i];
    seqs.push_back(seq);
    msgpack::object_handle handle = msgpack::unpack(frames[3].data<char>(), frames[3].size());
    const msgpack::object& events = handle.get().via.array.ptr[1];
    for (std::uint32_t e = 0; e < events.via.array.size; ++e) {
      const msgpack::object& event = events.via.array.ptr[e];
      replayed_hashes.push_back(event.via.map.ptr[1].val.via.array.ptr[0].as<std::uint64_t>());
    }
  }
  ASSERT_FALSE(seqs.empty());
  EXPECT_EQ(seqs.front(), 0u);
  for (std::size_t i = 1; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], seqs[i - 1] + 1);
  ASSERT_GE(replayed_hashes.size(), 3u);  // the probes, then 1, 2, 3
  EXPECT_EQ(std::vector<std::uint64_t>(replayed_hashes.end() - 3, replayed_hashes.end()),
            (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_EQ(publisher.value()->Stats().replays, 1u);
}

TEST(VllmEventPublisher, WithdrawsEverythingWhenTheLogDroppedWhatItHadNotSent) {
  KvEventLog log({.max_events = 2, .max_bytes = 1u << 20}, 1);
  VllmPublisherConfig config;
  config.endpoint = TempIpc("lost");
  auto publisher = VllmEventPublisher::Start(config, &log);
  ASSERT_TRUE(publisher.ok());
  zmq::context_t context;
  zmq::socket_t sub = Subscribe(context, config.endpoint, log);
  // Five records in one append: the log keeps two, the publisher missed three.
  std::vector<KvEvent> events;
  for (std::uint8_t i = 1; i <= 5; ++i) events.push_back(Removed("m", i));
  log.Append(std::move(events));
  auto m = Receive(sub);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->types.size(), 1u);
  EXPECT_EQ(m->types[0], "AllBlocksCleared");
  auto rest = Receive(sub);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->hashes, (std::vector<std::uint64_t>{4, 5}));
  EXPECT_EQ(publisher.value()->Stats().clears_for_loss, 1u);
}

TEST(VllmEventPublisher, RefusesWithoutTheLogOrABindableEndpoint) {
  KvEventLog off({.max_events = 0}, 1);
  VllmPublisherConfig config;
  config.endpoint = TempIpc("off");
  EXPECT_FALSE(VllmEventPublisher::Start(config, &off).ok());
  KvEventLog log({}, 1);
  config.endpoint = "tcp://not-an-address:x";
  auto refused = VllmEventPublisher::Start(config, &log);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--kv-events-url"), std::string::npos);
}

}  // namespace
}  // namespace lmcache::events
