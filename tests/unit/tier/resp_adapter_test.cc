// RespAdapter against a real redis-server (Debian's) on a unix socket and on
// loopback tcp: verified round trips, tenant isolation in the key, TTL, a
// corrupt or truncated value is a miss and is deleted, a down server costs
// fast failures (not timeouts) and is found again when it is back. The
// Cluster paths (slot routing, MOVED/ASK, a dead master, resharding) are
// proven end to end by tests/integration/redis_cluster_test.py.
#include "tier/resp/resp_adapter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "common/mask_secrets.h"
#include "fakes/fp8_values.h"
#include "fakes/keys.h"
#include "fakes/redis_process.h"
#include "tier/l2_config.h"
#include "tier/resp/resp_connection.h"
#include "tier/serde_adapter.h"

#include <nlohmann/json.hpp>

namespace lmcache::tier {
namespace {

using testing::KeyN;
using testing::RedisProcess;

std::vector<std::byte> Bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<unsigned char>(i * 7 + seed));
  return v;
}

int FreePort() {
  static int next = 20000 + (::getpid() % 20000);
  return next++;
}

class RespAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisProcess::Available()) GTEST_SKIP() << "redis-server is not installed";
  }
  std::unique_ptr<RespAdapter> Adapter(const std::string& url, std::uint32_t ttl = 0,
                                       RespTimeouts timeouts = {}) {
    RespAdapterConfig config;
    config.urls = {url};
    config.key_prefix = "t:";
    config.ttl_seconds = ttl;
    config.timeouts = timeouts;
    config.max_in_flight = 3;  // several pipelines per batch
    config.retry_interval = std::chrono::milliseconds(200);
    auto adapter = RespAdapter::Create(config);
    EXPECT_TRUE(adapter.ok()) << adapter.status().ToString();
    return std::move(*adapter);
  }
};

// A URL's password never reaches what the adapter tells anyone: its
// description (in /status, a /metrics label and the start log) and its
// condition show the URL with the password masked (before, both carried it).
TEST_F(RespAdapterTest, AUrlsPasswordIsMaskedInTheDescriptionAndTheCondition) {
  auto adapter = Adapter("redis://admin:hunter2@127.0.0.1:" + std::to_string(FreePort()));
  const L2AdapterStats stats = adapter->Stats();
  EXPECT_EQ(stats.description.find("hunter2"), std::string::npos) << stats.description;
  EXPECT_NE(stats.description.find("redis://admin:***@127.0.0.1:"), std::string::npos)
      << stats.description;
  EXPECT_EQ(stats.condition.find("hunter2"), std::string::npos) << stats.condition;
}

// Every form of URL the adapter's own parser accepts, with passwords
// holding each character the old masker ended a URL at (',', ' ', quotes)
// and those the parser splits on ('@', ':', '/'): the password the parser
// takes out of it never appears in what MaskSecrets shows, as a plain value
// or inside JSON (issue 62, section 7: "Tr0ub4dor,3" was shown in clear).
TEST(RespUrlMaskingTest, NoPasswordTheParserAcceptsIsShown) {
  const std::vector<std::string> passwords = {"Tr0ub4dor,3", "two words", "q\"uote", "it's",
                                              "p@ss:w/rd", "a,b c\"d'e@f", "tab\there", "x"};
  for (const std::string& password : passwords) {
    for (const std::string& url :
         {"redis://" + password + "@10.0.0.5:6379", "redis://app:" + password + "@h:6379/1",
          "redis://:" + password + "@[::1]:7000", "redis://app:" + password + "@h"}) {
      RespCredentials credentials;
      auto parsed = ParseRespUrl(url, &credentials);
      ASSERT_TRUE(parsed.ok()) << url << ": " << parsed.status().ToString();
      // The secret is what the parser takes (in the password-only form a
      // ':' makes what precedes it a user name, which is not masked).
      if (url.find("app:") != std::string::npos || password.find(':') == std::string::npos) {
        ASSERT_EQ(credentials.password, password) << url;
      }
      ASSERT_FALSE(credentials.password.empty()) << url;
      const std::string json_value = nlohmann::json(url).dump();  // escaped as JSON writes it
      for (const std::string& shown :
           {MaskSecrets(url), MaskSecrets(R"({"type": "resp", "url": )" + json_value + "}"),
            MaskSecrets(R"({"url": [)" + json_value + ", " + json_value + "]}")}) {
        EXPECT_EQ(shown.find(credentials.password), std::string::npos) << url << " -> " << shown;
        const std::string escaped_password = nlohmann::json(credentials.password).dump();
        EXPECT_EQ(shown.find(escaped_password.substr(1, escaped_password.size() - 2)),
                  std::string::npos)
            << url << " -> " << shown;
        EXPECT_NE(shown.find("***"), std::string::npos) << shown;
      }
    }
  }
}

TEST_F(RespAdapterTest, KeysNameEveryPartOfTheIdentity) {
  store::ObjectKey key = KeyN(1);
  key.model_name = "org/model";
  key.kv_rank = *store::PackKvRank(2, 1);
  key.object_group_id = 3;
  const std::string plain = RespObjectKey("p:", key);
  EXPECT_EQ(plain.substr(0, 3), "p:{");
  EXPECT_NE(plain.find("}@org/model@0x02010201@3"), std::string::npos) << plain;
  key.cache_salt = "tenant-a";
  EXPECT_EQ(RespObjectKey("p:", key), plain + "@tenant-a");
  key.tags = "app%v2";
  EXPECT_EQ(RespObjectKey("p:", key), plain + "@tenant-a@@Tapp%v2");
  // Every rank of one chunk lands in one slot: the tag is the chunk hash.
  store::ObjectKey other_rank = key;
  other_rank.kv_rank = *store::PackKvRank(2, 0);
  EXPECT_EQ(KeySlot(RespObjectKey("p:", key)), KeySlot(RespObjectKey("p:", other_rank)));
}

TEST_F(RespAdapterTest, StoresAndLoadsVerifiedBytesOverAUnixSocket) {
  RedisProcess redis;
  auto adapter = Adapter(redis.unix_url());
  EXPECT_FALSE(adapter->cluster());
  std::vector<store::ObjectKey> keys;
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < 10; ++i) {
    keys.push_back(KeyN(i));
    payloads.push_back(Bytes(64 * 1024 + i, i));
  }
  std::vector<L2Write> writes;
  for (int i = 0; i < 10; ++i) writes.push_back({&keys[i], payloads[i]});
  for (const Status& s : adapter->Store(writes)) EXPECT_TRUE(s.ok()) << s.ToString();

  std::vector<store::ObjectKey> probe = keys;
  probe.push_back(KeyN(99));
  const std::vector<bool> held = adapter->LookupAndLock(probe);
  EXPECT_EQ(std::count(held.begin(), held.end(), true), 10);
  EXPECT_FALSE(held.back());
  adapter->Unlock(probe);

  std::vector<std::vector<std::byte>> out(11);
  std::vector<L2Read> reads;
  for (int i = 0; i < 11; ++i) {
    out[i].resize(i < 10 ? payloads[i].size() : 100);
    reads.push_back({&probe[i], out[i]});
  }
  const auto outcomes = adapter->Load(reads);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(outcomes[i], L2LoadOutcome::kLoaded) << i;
    EXPECT_EQ(out[i], payloads[i]) << i;
  }
  EXPECT_EQ(outcomes[10], L2LoadOutcome::kMissing);
  const L2AdapterStats s = adapter->Stats();
  EXPECT_EQ(s.type, "resp");
  EXPECT_EQ(s.stored_objects, 10u);
  EXPECT_EQ(s.loaded_objects, 10u);
  EXPECT_EQ(s.load_misses, 1u);
  EXPECT_TRUE(s.condition.empty()) << s.condition;
}

TEST_F(RespAdapterTest, ForcedStandaloneNeverAsksForTheClusterTopology) {
  RedisProcess redis(0, {"--rename-command", "CLUSTER", ""});  // CLUSTER SLOTS would fail
  RespAdapterConfig config;
  config.urls = {redis.unix_url()};
  config.mode = RespMode::kStandalone;
  auto adapter = RespAdapter::Create(config);
  ASSERT_TRUE(adapter.ok());
  const auto key = KeyN(1);
  const auto bytes = Bytes(512, 3);
  const std::vector<L2Write> writes = {{&key, bytes}};
  ASSERT_TRUE((*adapter)->Store(writes)[0].ok());
  EXPECT_FALSE((*adapter)->cluster());
  EXPECT_EQ((*adapter)->counters().topology_refreshes, 0u);
}

TEST_F(RespAdapterTest, TenantsAndRanksNeverShareAnObject) {
  RedisProcess redis;
  auto adapter = Adapter(redis.unix_url());
  store::ObjectKey a = KeyN(1);
  a.cache_salt = "a";
  store::ObjectKey b = a;
  b.cache_salt = "b";
  const auto bytes = Bytes(4096, 1);
  const std::vector<L2Write> writes = {{&a, bytes}};
  ASSERT_TRUE(adapter->Store(writes)[0].ok());
  const std::vector<store::ObjectKey> probe = {a, b};
  EXPECT_EQ(adapter->LookupAndLock(probe), (std::vector<bool>{true, false}));
}

// Issue 22: a tagged and an untagged store of the same tokens stay apart
// in Redis (a real redis-server), and each loads its own bytes.
TEST_F(RespAdapterTest, TaggedAndUntaggedObjectsOfOneChunkStayApart) {
  RedisProcess redis;
  auto adapter = Adapter(redis.unix_url());
  const store::ObjectKey untagged = KeyN(3);
  store::ObjectKey tagged = untagged;
  tagged.tags = "tenant%a";
  const auto first = Bytes(4096, 1);
  const std::vector<L2Write> write_untagged = {{&untagged, first}};
  ASSERT_TRUE(adapter->Store(write_untagged)[0].ok());
  const std::vector<store::ObjectKey> probe = {untagged, tagged};
  EXPECT_EQ(adapter->LookupAndLock(probe), (std::vector<bool>{true, false}));
  adapter->Unlock(probe);
  const auto second = Bytes(4096, 2);
  const std::vector<L2Write> write_tagged = {{&tagged, second}};
  ASSERT_TRUE(adapter->Store(write_tagged)[0].ok());
  EXPECT_EQ(adapter->LookupAndLock(probe), (std::vector<bool>{true, true}));
  adapter->Unlock(probe);
  const std::pair<const store::ObjectKey*, const std::vector<std::byte>*> cases[] = {
      {&untagged, &first}, {&tagged, &second}};
  for (const auto& [key, expected] : cases) {
    std::vector<std::byte> out(expected->size());
    const std::vector<L2Read> reads = {{key, out}};
    ASSERT_EQ(adapter->Load(reads)[0], L2LoadOutcome::kLoaded) << key->DebugString();
    EXPECT_EQ(out, *expected) << key->DebugString();
  }
}

TEST_F(RespAdapterTest, TtlIsSetOnEveryKey) {
  RedisProcess redis;
  auto adapter = Adapter(redis.unix_url(), /*ttl=*/120);
  const auto key = KeyN(1);
  const auto bytes = Bytes(1000, 1);
  const std::vector<L2Write> writes = {{&key, bytes}};
  ASSERT_TRUE(adapter->Store(writes)[0].ok());
  redisReply* ttl = redis.Command({"TTL", RespObjectKey("t:", key)});
  ASSERT_NE(ttl, nullptr);
  EXPECT_EQ(ttl->type, REDIS_REPLY_INTEGER);
  EXPECT_GT(ttl->integer, 100);
  EXPECT_LE(ttl->integer, 120);
  freeReplyObject(ttl);
}

TEST_F(RespAdapterTest, CorruptAndTruncatedValuesAreMissesAndAreDeleted) {
  RedisProcess redis;
  auto adapter = Adapter(redis.unix_url());
  const auto flipped = KeyN(1), truncated = KeyN(2), foreign = KeyN(3);
  const auto bytes = Bytes(8192, 5);
  const std::vector<L2Write> writes = {{&flipped, bytes}, {&truncated, bytes}};
  for (const Status& s : adapter->Store(writes)) ASSERT_TRUE(s.ok());
  const std::string flipped_name = RespObjectKey("t:", flipped);
  const std::string truncated_name = RespObjectKey("t:", truncated);
  // One payload byte flipped in place; one value cut short; one value that
  // is not ours at all under a key of ours.
  freeReplyObject(redis.Command({"SETRANGE", flipped_name, "5000", "X"}));
  freeReplyObject(redis.Command({"SETRANGE", truncated_name, "0", ""}));
  redisReply* len = redis.Command({"STRLEN", truncated_name});
  const std::string cut = std::to_string(len->integer - 100);
  freeReplyObject(len);
  freeReplyObject(redis.Command(
      {"EVAL", "redis.call('SET', KEYS[1], string.sub(redis.call('GET', KEYS[1]), 1, ARGV[1]))",
       "1", truncated_name, cut}));
  freeReplyObject(redis.Command({"SET", RespObjectKey("t:", foreign), "not an object"}));

  std::vector<std::byte> out1(8192), out2(8192), out3(8192);
  const std::vector<L2Read> reads = {{&flipped, out1}, {&truncated, out2}, {&foreign, out3}};
  const auto outcomes = adapter->Load(reads);
  EXPECT_EQ(outcomes[0], L2LoadOutcome::kCorrupt);
  EXPECT_EQ(outcomes[1], L2LoadOutcome::kCorrupt);
  EXPECT_EQ(outcomes[2], L2LoadOutcome::kCorrupt);
  EXPECT_EQ(adapter->Stats().checksum_failures, 3u);
  for (const auto* key : {&flipped, &truncated, &foreign}) {
    redisReply* exists = redis.Command({"EXISTS", RespObjectKey("t:", *key)});
    EXPECT_EQ(exists->integer, 0) << "a corrupt value was not deleted";
    freeReplyObject(exists);
  }
}

// A payload large enough to arrive in many reads, checksummed piece by piece
// as it lands in L1: one byte changed near its end is still caught, and an
// intact neighbour in the same pipeline still loads.
TEST_F(RespAdapterTest, ALargePayloadDamagedNearItsEndIsCaught) {
  RedisProcess redis;
  auto adapter = Adapter(redis.unix_url());
  const auto damaged = KeyN(11), intact = KeyN(12);
  const auto bytes = Bytes(6 << 20, 9);
  const std::vector<L2Write> writes = {{&damaged, bytes}, {&intact, bytes}};
  for (const Status& s : adapter->Store(writes)) ASSERT_TRUE(s.ok());
  redisReply* len = redis.Command({"STRLEN", RespObjectKey("t:", damaged)});
  const std::string near_end = std::to_string(len->integer - 3);
  freeReplyObject(len);
  freeReplyObject(redis.Command({"SETRANGE", RespObjectKey("t:", damaged), near_end, "!"}));
  std::vector<std::byte> out1(bytes.size()), out2(bytes.size());
  const std::vector<L2Read> reads = {{&damaged, out1}, {&intact, out2}};
  const auto outcomes = adapter->Load(reads);
  EXPECT_EQ(outcomes[0], L2LoadOutcome::kCorrupt);
  EXPECT_EQ(outcomes[1], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out2, bytes);
}

// Issue 64: under an fp8 serde a value holds half the object; it streams
// into the start of the object's buffer and is decoded there, by an adapter
// with the serde or one without; damaged, it is a corrupt miss, deleted.
TEST_F(RespAdapterTest, EncodedValuesHoldHalfTheBytesAndDecodeWhereverTheyAreRead) {
  RedisProcess redis;
  ElementTypeDirectory directory;
  directory.Bind([](const store::ObjectKey&, std::uint64_t) { return ElementType::kBFloat16; });
  SerdeAdapter serde(Adapter(redis.unix_url()), {PayloadCodec::kFp8E4M3}, &directory);
  const auto key = KeyN(1), damaged = KeyN(2);
  const auto bytes = testing::Fp8ExactBFloat16Bytes(256 * 1024, 3);
  const std::vector<L2Write> writes = {{&key, bytes}, {&damaged, bytes}};
  for (const Status& s : serde.Store(writes)) ASSERT_TRUE(s.ok()) << s.ToString();
  redisReply* len = redis.Command({"STRLEN", RespObjectKey("t:", key)});
  EXPECT_EQ(len->integer, static_cast<long long>(EncodedObjectHeaderBytes(key) + bytes.size() / 2));
  freeReplyObject(len);
  freeReplyObject(redis.Command({"SETRANGE", RespObjectKey("t:", damaged), "5000", "!"}));

  auto plain = Adapter(redis.unix_url());  // no serde: what a changed config reads with
  std::vector<std::byte> out1(bytes.size()), out2(bytes.size());
  const std::vector<L2Read> reads = {{&key, out1}, {&damaged, out2}};
  const auto outcomes = plain->Load(reads);
  EXPECT_EQ(outcomes[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out1, bytes);
  EXPECT_EQ(outcomes[1], L2LoadOutcome::kCorrupt);
  const std::vector<store::ObjectKey> probe = {key, damaged};
  EXPECT_EQ(plain->LookupAndLock(probe), (std::vector<bool>{true, false}));
  std::vector<std::byte> again(bytes.size());
  const std::vector<L2Read> through_serde = {{&key, again}};
  EXPECT_EQ(serde.Load(through_serde)[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(again, bytes);
}

TEST_F(RespAdapterTest, AnotherGeometrysObjectIsAMissAndIsKept) {
  RedisProcess redis;
  auto adapter = Adapter(redis.unix_url());
  const auto key = KeyN(1);
  const auto bytes = Bytes(4096, 1);
  const std::vector<L2Write> writes = {{&key, bytes}};
  ASSERT_TRUE(adapter->Store(writes)[0].ok());
  std::vector<std::byte> smaller(2048);
  const std::vector<L2Read> reads = {{&key, smaller}};
  EXPECT_EQ(adapter->Load(reads)[0], L2LoadOutcome::kMissing);
  const std::vector<store::ObjectKey> probe = {key};
  EXPECT_EQ(adapter->LookupAndLock(probe), std::vector<bool>{true});
}

TEST_F(RespAdapterTest, ADownServerFailsFastAndIsFoundAgain) {
  const int port = FreePort();
  // Timeouts far longer than any call that does not wait for one: a call
  // that did would be unmistakable whatever the machine's load.
  RespTimeouts timeouts;
  timeouts.connect = std::chrono::seconds(30);
  timeouts.command = std::chrono::seconds(30);
  auto adapter = Adapter("redis://127.0.0.1:" + std::to_string(port), 0, timeouts);
  const auto key = KeyN(1);
  const auto bytes = Bytes(4096, 1);
  const std::vector<L2Write> writes = {{&key, bytes}};
  const std::vector<store::ObjectKey> probe = {key};
  // Nothing listens: every call fails, none waits for a timeout. The
  // yardstick is measured in this run: the same calls to a live server (a
  // round trip each), interleaved call by call with those to the dead one,
  // so both see the same load; a failure must cost no more than a few successes.
  {
    RedisProcess live;
    auto baseline = Adapter(live.unix_url(), 0, timeouts);
    const auto timed_ms = [](auto&& call) {
      const auto start = std::chrono::steady_clock::now();
      call();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
    };
    std::vector<double> down_ms, live_ms;
    for (int i = 0; i < 20; ++i) {
      down_ms.push_back(timed_ms([&] { EXPECT_FALSE(adapter->Store(writes)[0].ok()); }));
      live_ms.push_back(timed_ms([&] { EXPECT_TRUE(baseline->Store(writes)[0].ok()); }));
    }
    down_ms.push_back(timed_ms(
        [&] { EXPECT_EQ(adapter->LookupAndLock(probe), std::vector<bool>{false}); }));
    live_ms.push_back(timed_ms(
        [&] { EXPECT_EQ(baseline->LookupAndLock(probe), std::vector<bool>{true}); }));
    baseline->Unlock(probe);
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double slowest_down = *std::max_element(down_ms.begin(), down_ms.end());
    std::printf("[down] 21 calls to a dead server: median %.3f ms, slowest %.3f ms; "
                "to a live one: median %.3f ms\n",
                median(down_ms), slowest_down, median(live_ms));
    // None waited out a timeout (each would cost 30 s)...
    EXPECT_LT(slowest_down, static_cast<double>(timeouts.connect.count()) / 2)
        << "a call to a dead server waited for a timeout";
    // ...nor waits at all: a typical failure costs at most a few round trips
    // to a live server (it costs no I/O inside the retry interval, one refused
    // connect outside it), where a call that slept or retried would cost
    // hundreds.
    EXPECT_LE(median(down_ms), 5 * median(live_ms))
        << "calls to a dead server are slower than round trips to a live one";
  }
  EXPECT_FALSE(adapter->Stats().condition.empty());
  EXPECT_EQ(adapter->Stats().store_failures, 20u);

  RedisProcess redis(port);
  ASSERT_TRUE(redis.Ping());
  bool stored = false;
  for (int i = 0; i < 100 && !stored; ++i) {
    stored = adapter->Store(writes)[0].ok();
    if (!stored) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(stored) << "the adapter did not reconnect";
  std::vector<std::byte> out(4096);
  const std::vector<L2Read> reads = {{&key, out}};
  EXPECT_EQ(adapter->Load(reads)[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, bytes);
  EXPECT_TRUE(adapter->Stats().condition.empty()) << adapter->Stats().condition;

  // Killed under a live connection: the next call fails (not hangs), and a
  // restarted server is used again.
  redis.Kill();
  std::vector<std::byte> again(4096);
  const std::vector<L2Read> reload = {{&key, again}};
  EXPECT_EQ(adapter->Load(reload)[0], L2LoadOutcome::kFailed);
  redis.Start();
  bool loaded = false;
  for (int i = 0; i < 100 && !loaded; ++i) {
    loaded = adapter->Store(writes)[0].ok();
    if (!loaded) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(loaded);
}

TEST_F(RespAdapterTest, AuthAndDatabaseAreSentAtConnect) {
  RedisProcess redis(0, {"--requirepass", "s3cret"});
  RespAdapterConfig config;
  config.urls = {redis.unix_url()};
  config.credentials.password = "wrong";
  config.retry_interval = std::chrono::milliseconds(10);
  auto refused = RespAdapter::Create(config);
  ASSERT_TRUE(refused.ok());
  const auto key = KeyN(1);
  const auto bytes = Bytes(100, 1);
  const std::vector<L2Write> writes = {{&key, bytes}};
  EXPECT_FALSE((*refused)->Store(writes)[0].ok());

  config.credentials.password = "s3cret";
  config.credentials.db = 3;
  auto adapter = RespAdapter::Create(config);
  ASSERT_TRUE(adapter.ok());
  ASSERT_TRUE((*adapter)->Store(writes)[0].ok());
  const std::string name = RespObjectKey(config.key_prefix, key);
  for (const auto& [db, expected] : {std::pair{"0", 0}, std::pair{"3", 1}}) {
    redisReply* exists = redis.Commands({{"AUTH", "s3cret"}, {"SELECT", db}, {"EXISTS", name}});
    ASSERT_NE(exists, nullptr);
    EXPECT_EQ(exists->integer, expected) << "db " << db;
    freeReplyObject(exists);
  }
}

TEST_F(RespAdapterTest, ConfigIsStrictAndNamesTheField) {
  auto ok = ParseL2AdapterSpec(
      R"({"type":"resp","url":["redis://127.0.0.1:7000","redis://127.0.0.1:7001"],)"
      R"("key_prefix":"x:","ttl_seconds":60,"max_in_flight":4,"mode":"cluster"})",
      1);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const auto& c = std::any_cast<const RespAdapterConfig&>(ok->config);
  EXPECT_EQ(c.urls.size(), 2u);
  EXPECT_EQ(c.mode, RespMode::kCluster);
  EXPECT_EQ(c.ttl_seconds, 60u);
  auto creds = ParseL2AdapterSpec(R"({"type":"resp","url":"redis://u:p@host:6380/2"})", 1);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(std::any_cast<const RespAdapterConfig&>(creds->config).credentials.username, "u");
  EXPECT_EQ(std::any_cast<const RespAdapterConfig&>(creds->config).credentials.db, 2);

  const std::pair<const char*, const char*> bad[] = {
      {R"({"type":"resp"})", "'url'"},
      {R"({"type":"resp","url":"rediss://h:1"})", "'url'"},
      {R"({"type":"resp","url":"redis://h:99999"})", "'url'"},
      {R"({"type":"resp","url":"unix://relative"})", "'url'"},
      {R"({"type":"resp","url":[]})", "'url'"},
      {R"({"type":"resp","url":"redis://h","mode":"sentinel"})", "'mode'"},
      {R"({"type":"resp","url":"redis://h","key_prefix":"{x}"})", "'key_prefix'"},
      {R"({"type":"resp","url":"redis://h","mode":"cluster","db":1})", "'db'"},
      {R"({"type":"resp","url":"redis://h","max_in_flight":0})", "'max_in_flight'"},
      {R"({"type":"resp","url":"redis://h","bogus":1})", "'bogus'"},
  };
  for (const auto& [json, field] : bad) {
    auto spec = ParseL2AdapterSpec(json, 2);
    ASSERT_FALSE(spec.ok()) << json;
    EXPECT_NE(spec.status().message().find(field), std::string::npos)
        << json << " -> " << spec.status().message();
    EXPECT_NE(spec.status().message().find("#2"), std::string::npos);
  }
}

}  // namespace
}  // namespace lmcache::tier
