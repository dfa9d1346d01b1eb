// The s3 adapter against a real Ceph gateway (radosgw, Debian's Ceph; one
// cluster for the whole binary, started by tools/ceph_s3.sh): store, lookup
// and load byte for byte, a second adapter finding the first's objects (by
// HEAD and by the startup listing), corrupt, foreign and other-geometry
// objects, wrong credentials, a gateway killed under loads and stores, a
// frozen gateway against the deadline, and capacity eviction.
#include "tier/s3/s3_adapter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "fakes/ceph_gateway.h"
#include "fakes/keys.h"
#include "fakes/wait_until.h"
#include "tier/object_format.h"
#include "tier/payload_codec.h"

namespace lmcache::tier {
namespace {

using lmcache::testing::CephGateway;
using lmcache::testing::KeyN;

constexpr char kBucket[] = "lmc-test";
constexpr std::size_t kObjectBytes = 256 << 10;

std::vector<std::byte> Bytes(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> out(size);
  std::mt19937_64 random(seed);
  for (std::size_t i = 0; i < size; i += 8) {
    const std::uint64_t v = random();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, size - i));
  }
  return out;
}

class S3AdapterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!CephGateway::Available()) return;
    gateway_ = new CephGateway(LMC_CEPH_S3_SCRIPT, {kBucket});
  }
  static void TearDownTestSuite() {
    delete gateway_;
    gateway_ = nullptr;
  }
  void SetUp() override {
    if (!CephGateway::Available())
      GTEST_SKIP() << "Ceph (ceph-mon, ceph-osd, radosgw) is not installed";
    ASSERT_TRUE(gateway_->ok()) << gateway_->error();
    // Every test its own prefix in the one bucket.
    prefix_ = std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "/";
  }

  S3AdapterConfig Config() const {
    S3AdapterConfig c;
    const std::string endpoint = gateway_->env("S3_ENDPOINT");
    c.client.scheme = "http";
    c.client.host = endpoint.substr(std::string("http://").size());
    c.client.bucket = kBucket;
    c.client.virtual_hosted = false;
    c.client.region = gateway_->env("S3_REGION");
    c.client.credentials = {gateway_->env("S3_ACCESS_KEY"), gateway_->env("S3_SECRET_KEY"), ""};
    c.client.request_timeout = std::chrono::milliseconds(10000);
    c.key_prefix = prefix_;
    c.credentials_source = "test";
    return c;
  }

  static std::unique_ptr<S3Adapter> Make(const S3AdapterConfig& config) {
    auto adapter = S3Adapter::Create(config);
    EXPECT_TRUE(adapter.ok()) << adapter.status().message();
    if (!adapter.ok()) return nullptr;
    return std::move(adapter).value();
  }

  // Stores `count` objects from key n = first on; their bytes.
  std::vector<std::vector<std::byte>> StoreN(S3Adapter& adapter, std::uint64_t first,
                                             std::size_t count, std::size_t size = kObjectBytes) {
    std::vector<store::ObjectKey> keys;
    std::vector<std::vector<std::byte>> values;
    for (std::size_t i = 0; i < count; ++i) {
      keys.push_back(KeyN(first + i));
      values.push_back(Bytes(size, first + i));
    }
    std::vector<L2Write> writes;
    for (std::size_t i = 0; i < count; ++i) writes.emplace_back(&keys[i], values[i]);
    for (const Status& s : adapter.Store(writes)) EXPECT_TRUE(s.ok()) << s.message();
    return values;
  }

  // Loads keys first.. into fresh buffers of `size`; the outcomes, and the buffers.
  static std::vector<L2LoadOutcome> LoadN(S3Adapter& adapter, std::uint64_t first,
                                          std::size_t count,
                                          std::vector<std::vector<std::byte>>* out,
                                          std::size_t size = kObjectBytes) {
    std::vector<store::ObjectKey> keys;
    for (std::size_t i = 0; i < count; ++i) keys.push_back(KeyN(first + i));
    out->assign(count, std::vector<std::byte>(size));
    std::vector<L2Read> reads;
    for (std::size_t i = 0; i < count; ++i) reads.push_back({&keys[i], (*out)[i]});
    return adapter.Load(reads);
  }

  // A raw S3 client on the same bucket, for what no adapter of ours writes.
  std::unique_ptr<S3Client> RawClient() const {
    auto client = S3Client::Create(Config().client);
    EXPECT_TRUE(client.ok());
    return std::move(client).value();
  }
  static S3Response Call(S3Client& client, S3Call call) {
    std::promise<S3Response> answer;
    auto future = answer.get_future();
    call.done = [&answer](S3Response r) { answer.set_value(std::move(r)); };
    client.Submit(std::move(call));
    return future.get();
  }
  long Head(S3Client& client, const store::ObjectKey& key) const {
    S3Call call;
    call.method = S3Method::kHead;
    call.object = S3AdapterTestName(key);
    return Call(client, std::move(call)).http_status;
  }
  std::string S3AdapterTestName(const store::ObjectKey& key) const;

  static CephGateway* gateway_;
  std::string prefix_;
};

CephGateway* S3AdapterTest::gateway_ = nullptr;

}  // namespace
}  // namespace lmcache::tier

#include "tier/s3/s3_object_name.h"

namespace lmcache::tier {
namespace {

std::string S3AdapterTest::S3AdapterTestName(const store::ObjectKey& key) const {
  return S3ObjectName(prefix_, key);
}

TEST_F(S3AdapterTest, StoresLooksUpAndLoadsByteForByte) {
  auto adapter = Make(Config());
  ASSERT_NE(adapter, nullptr);
  const auto values = StoreN(*adapter, 0, 12);
  std::vector<store::ObjectKey> keys;
  for (int i = 0; i < 14; ++i) keys.push_back(KeyN(i));
  const std::vector<bool> found = adapter->LookupAndLock(keys);
  for (int i = 0; i < 14; ++i) EXPECT_EQ(found[i], i < 12) << i;
  adapter->Unlock(std::span(keys).first(12));
  std::vector<std::vector<std::byte>> out;
  const auto outcomes = LoadN(*adapter, 0, 13, &out);
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(outcomes[i], L2LoadOutcome::kLoaded) << i;
    EXPECT_EQ(out[i], values[i]) << i;
  }
  EXPECT_EQ(outcomes[12], L2LoadOutcome::kMissing);
  const L2AdapterStats s = adapter->Stats();
  EXPECT_EQ(s.type, "s3");
  EXPECT_EQ(s.stored_objects, 12u);
  EXPECT_EQ(s.loaded_objects, 12u);
  EXPECT_EQ(s.load_misses, 1u);
  EXPECT_EQ(s.objects, 12u);
  EXPECT_TRUE(s.condition.empty()) << s.condition;
  EXPECT_EQ(s.description.find(gateway_->env("S3_SECRET_KEY")), std::string::npos);
}

TEST_F(S3AdapterTest, EncodedObjectsDecodeOnLoad) {
  auto adapter = Make(Config());
  ASSERT_NE(adapter, nullptr);
  // bfloat16 values fp8 holds exactly (1.0, -2.0, 0.5...), so the load is byte-exact.
  std::vector<std::byte> raw(kObjectBytes);
  const std::uint16_t values[] = {0x3F80, 0xC000, 0x3F00, 0x0000, 0x4040};
  for (std::size_t i = 0; i < raw.size() / 2; ++i) std::memcpy(&raw[2 * i], &values[i % 5], 2);
  std::vector<std::byte> encoded(raw.size() / 2);
  ASSERT_TRUE(EncodePayload(PayloadCodec::kFp8E4M3, ElementType::kBFloat16, raw, encoded).ok());
  const store::ObjectKey key = KeyN(1);
  const L2Write write(&key, encoded, {PayloadCodec::kFp8E4M3, ElementType::kBFloat16, raw.size()});
  ASSERT_TRUE(adapter->Store(std::span(&write, 1))[0].ok());
  std::vector<std::byte> out(raw.size());
  const L2Read read{&key, out};
  ASSERT_EQ(adapter->Load(std::span(&read, 1))[0], L2LoadOutcome::kLoaded);
  EXPECT_EQ(out, raw);
}

TEST_F(S3AdapterTest, AnotherServerFindsObjectsByHeadAndByListing) {
  auto writer = Make(Config());
  ASSERT_NE(writer, nullptr);
  const auto values = StoreN(*writer, 100, 40);  // more than one lookup window
  // A server that never lists finds them by asking the bucket.
  S3AdapterConfig no_listing = Config();
  no_listing.max_listed_objects = 0;
  auto reader = Make(no_listing);
  ASSERT_NE(reader, nullptr);
  std::vector<store::ObjectKey> keys;
  for (int i = 0; i < 41; ++i) keys.push_back(KeyN(100 + i));
  const std::vector<bool> found = reader->LookupAndLock(keys);
  for (int i = 0; i < 41; ++i) EXPECT_EQ(found[i], i < 40) << i;
  std::vector<std::vector<std::byte>> out;
  const auto outcomes = LoadN(*reader, 100, 40, &out);
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(outcomes[i], L2LoadOutcome::kLoaded) << i;
    EXPECT_EQ(out[i], values[i]);
  }
  reader->Unlock(std::span(keys).first(40));
  // A restarted server lists them, page by page (7 objects a page here, so
  // the continuation tokens, which RGW makes from object names, go back signed).
  S3AdapterConfig paged = Config();
  paged.list_page_objects = 7;
  auto restarted = Make(paged);
  ASSERT_NE(restarted, nullptr);
  ASSERT_TRUE(lmcache::testing::WaitUntil([&] { return restarted->listing_done(); }));
  EXPECT_EQ(restarted->Stats().rebuilt_objects, 40u);
  EXPECT_EQ(restarted->Stats().objects, 40u);
  auto listed = restarted->List(nullptr, 100, nullptr);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 40u);
}

TEST_F(S3AdapterTest, CorruptObjectsAreMissesAndDeletedForeignOnesLeftAlone) {
  auto adapter = Make(Config());
  ASSERT_NE(adapter, nullptr);
  StoreN(*adapter, 0, 3);
  auto raw = RawClient();
  // Key 0: its payload damaged (one byte); key 1: truncated; key 2 intact.
  std::vector<std::byte> damaged;
  {
    S3Call get;
    get.object = S3AdapterTestName(KeyN(0));
    S3Response r = Call(*raw, std::move(get));
    ASSERT_TRUE(r.ok());
    damaged.assign(reinterpret_cast<const std::byte*>(r.body.data()),
                   reinterpret_cast<const std::byte*>(r.body.data()) + r.body.size());
    damaged.back() ^= std::byte{1};
  }
  const std::vector<std::byte> truncated(damaged.begin(), damaged.begin() + damaged.size() / 2);
  const std::vector<std::pair<int, const std::vector<std::byte>*>> replaced = {{0, &damaged},
                                                                               {1, &truncated}};
  for (const auto& [n, bytes] : replaced) {
    S3Call put;
    put.method = S3Method::kPut;
    put.object = S3AdapterTestName(KeyN(n));
    put.body = {std::span<const std::byte>(*bytes)};
    ASSERT_TRUE(Call(*raw, std::move(put)).ok());
  }
  // Under key 3's name, bytes that are not ours (the reference's objects have
  // its names): a miss, never deleted.
  StoreN(*adapter, 3, 1);
  {
    S3Call put;
    put.method = S3Method::kPut;
    put.object = S3AdapterTestName(KeyN(3));
    const std::string theirs = "a tensor the reference wrote, no header of ours";
    put.body = {std::as_bytes(std::span(theirs))};
    ASSERT_TRUE(Call(*raw, std::move(put)).ok());
  }
  // A foreign object under our prefix: not ours, never touched.
  S3Call foreign;
  foreign.method = S3Method::kPut;
  foreign.object = prefix_ + "README";
  const std::string text = "someone else's";
  foreign.body = {std::as_bytes(std::span(text))};
  ASSERT_TRUE(Call(*raw, std::move(foreign)).ok());

  std::vector<std::vector<std::byte>> out;
  const auto outcomes = LoadN(*adapter, 0, 3, &out);
  EXPECT_EQ(outcomes[0], L2LoadOutcome::kCorrupt);
  EXPECT_EQ(outcomes[1], L2LoadOutcome::kCorrupt);
  EXPECT_EQ(outcomes[2], L2LoadOutcome::kLoaded);
  EXPECT_EQ(adapter->Stats().checksum_failures, 2u);
  std::vector<std::vector<std::byte>> theirs;
  EXPECT_EQ(LoadN(*adapter, 3, 1, &theirs)[0], L2LoadOutcome::kMissing);
  EXPECT_EQ(adapter->Stats().checksum_failures, 2u);
  ASSERT_TRUE(lmcache::testing::WaitUntil([&] { return Head(*raw, KeyN(0)) == 404; }));
  ASSERT_TRUE(lmcache::testing::WaitUntil([&] { return Head(*raw, KeyN(1)) == 404; }));
  EXPECT_EQ(Head(*raw, KeyN(2)), 200);
  EXPECT_EQ(Head(*raw, KeyN(3)), 200);
  // A restart lists the survivor and leaves the foreign object alone.
  auto restarted = Make(Config());
  ASSERT_TRUE(lmcache::testing::WaitUntil([&] { return restarted->listing_done(); }));
  // Key 2; key 3's object is too small to be one of ours (counted as others').
  EXPECT_EQ(restarted->Stats().rebuilt_objects, 1u);
  S3Call head;
  head.method = S3Method::kHead;
  head.object = prefix_ + "README";
  EXPECT_EQ(Call(*raw, std::move(head)).http_status, 200);
}

TEST_F(S3AdapterTest, AnotherGeometryIsAMissLeftInPlace) {
  auto adapter = Make(Config());
  ASSERT_NE(adapter, nullptr);
  StoreN(*adapter, 0, 1);
  std::vector<std::vector<std::byte>> out;
  EXPECT_EQ(LoadN(*adapter, 0, 1, &out, kObjectBytes / 2)[0], L2LoadOutcome::kMissing);
  auto raw = RawClient();
  EXPECT_EQ(Head(*raw, KeyN(0)), 200);
  EXPECT_EQ(LoadN(*adapter, 0, 1, &out)[0], L2LoadOutcome::kLoaded);
}

TEST_F(S3AdapterTest, WrongCredentialsAreRefusedCleanly) {
  S3AdapterConfig config = Config();
  config.client.credentials.secret_access_key = "not-the-secret";
  auto adapter = Make(config);
  ASSERT_NE(adapter, nullptr);
  const store::ObjectKey key = KeyN(0);
  const auto bytes = Bytes(kObjectBytes, 0);
  const L2Write write(&key, bytes);
  const Status stored = adapter->Store(std::span(&write, 1))[0];
  EXPECT_EQ(stored.code(), ErrorCode::kIoError);
  EXPECT_NE(stored.message().find("403"), std::string::npos) << stored.message();
  EXPECT_FALSE(adapter->LookupAndLock(std::span(&key, 1))[0]);
  const L2AdapterStats s = adapter->Stats();
  EXPECT_NE(s.condition.find("access refused"), std::string::npos) << s.condition;
  EXPECT_NE(s.condition.find("SignatureDoesNotMatch"), std::string::npos) << s.condition;
  EXPECT_EQ(s.condition.find("not-the-secret"), std::string::npos) << s.condition;
  EXPECT_EQ(s.store_failures, 1u);
  EXPECT_EQ(s.objects, 0u);
}

TEST_F(S3AdapterTest, GatewayKilledUnderLoadsAndStoresFailsCleanlyAndRecovers) {
  S3AdapterConfig config = Config();
  config.client.retry_interval = std::chrono::milliseconds(300);
  auto adapter = Make(config);
  ASSERT_NE(adapter, nullptr);
  const auto values = StoreN(*adapter, 0, 64);
  // Loads and stores in flight while the gateway dies.
  std::vector<std::vector<std::byte>> out;
  std::vector<L2LoadOutcome> outcomes;
  std::thread loads([&] { outcomes = LoadN(*adapter, 0, 64, &out); });
  std::vector<store::ObjectKey> more;
  std::vector<std::vector<std::byte>> more_values;
  for (int i = 0; i < 32; ++i) {
    more.push_back(KeyN(1000 + i));
    more_values.push_back(Bytes(kObjectBytes, 1000 + i));
  }
  std::vector<L2Write> writes;
  for (int i = 0; i < 32; ++i) writes.emplace_back(&more[i], more_values[i]);
  std::vector<Status> stored;
  std::thread stores([&] { stored = adapter->Store(writes); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(gateway_->StopGateway());
  loads.join();
  stores.join();
  for (int i = 0; i < 64; ++i) {
    // Loaded byte for byte, or failed: never a wrong byte called loaded.
    EXPECT_TRUE(outcomes[i] == L2LoadOutcome::kLoaded || outcomes[i] == L2LoadOutcome::kFailed)
        << i;
    if (outcomes[i] == L2LoadOutcome::kLoaded) {
      EXPECT_EQ(out[i], values[i]) << i;
    }
  }
  // While it is down, calls fail at once rather than each waiting.
  const auto before = std::chrono::steady_clock::now();
  std::vector<std::vector<std::byte>> none;
  for (const auto o : LoadN(*adapter, 0, 8, &none)) EXPECT_EQ(o, L2LoadOutcome::kFailed);
  EXPECT_LT(std::chrono::steady_clock::now() - before, config.client.request_timeout);
  EXPECT_NE(adapter->Stats().condition.find("unreachable"), std::string::npos);
  ASSERT_TRUE(gateway_->StartGateway());
  // Back: what was stored before (and what the dying gateway took) loads.
  ASSERT_TRUE(lmcache::testing::WaitUntil([&] {
    std::vector<std::vector<std::byte>> again;
    return LoadN(*adapter, 0, 1, &again)[0] == L2LoadOutcome::kLoaded;
  }));
  const auto after = LoadN(*adapter, 0, 64, &out);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(after[i], L2LoadOutcome::kLoaded) << i;
    EXPECT_EQ(out[i], values[i]) << i;
  }
  for (int i = 0; i < 32; ++i) {
    if (!stored[i].ok()) continue;
    std::vector<std::vector<std::byte>> one;
    std::vector<L2Read> read{{&more[i], {}}};
    one.assign(1, std::vector<std::byte>(kObjectBytes));
    read[0].out = one[0];
    ASSERT_EQ(adapter->Load(read)[0], L2LoadOutcome::kLoaded) << i;
    EXPECT_EQ(one[0], more_values[i]);
  }
  EXPECT_TRUE(adapter->Stats().condition.empty());
}

TEST_F(S3AdapterTest, FrozenGatewayMeetsTheDeadline) {
  S3AdapterConfig config = Config();
  config.client.request_timeout = std::chrono::milliseconds(1500);
  auto adapter = Make(config);
  ASSERT_NE(adapter, nullptr);
  StoreN(*adapter, 0, 4);
  ASSERT_TRUE(gateway_->PauseGateway());
  std::atomic<bool> completed{false};
  std::vector<L2LoadOutcome> outcomes;
  std::vector<std::vector<std::byte>> out(4, std::vector<std::byte>(kObjectBytes));
  std::vector<store::ObjectKey> keys;
  for (int i = 0; i < 4; ++i) keys.push_back(KeyN(i));
  std::vector<L2Read> reads;
  for (int i = 0; i < 4; ++i) reads.push_back({&keys[i], out[i]});
  const auto start = std::chrono::steady_clock::now();
  // The submitting thread is not held: the call returns before the answer.
  adapter->SubmitLoad(reads, [&](std::vector<L2LoadOutcome> o) {
    outcomes = std::move(o);
    completed = true;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  const bool done =
      lmcache::testing::WaitUntil([&] { return completed.load(); }, std::chrono::seconds(10));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(gateway_->ResumeGateway());
  ASSERT_TRUE(done);
  for (const auto o : outcomes) EXPECT_EQ(o, L2LoadOutcome::kFailed);
  EXPECT_GE(took, std::chrono::milliseconds(1400));
  EXPECT_LT(took, std::chrono::milliseconds(5000));
}

TEST_F(S3AdapterTest, AMissingBucketIsACondition) {
  S3AdapterConfig config = Config();
  config.client.bucket = "lmc-no-such-bucket";
  auto adapter = Make(config);
  ASSERT_NE(adapter, nullptr);
  const store::ObjectKey key = KeyN(0);
  const auto bytes = Bytes(kObjectBytes, 0);
  const L2Write write(&key, bytes);
  EXPECT_FALSE(adapter->Store(std::span(&write, 1))[0].ok());
  EXPECT_NE(adapter->Stats().condition.find("refused (NoSuchBucket)"), std::string::npos)
      << adapter->Stats().condition;
}

// Destroyed while its startup listing waits on a frozen gateway: the listing
// ends unanswered, on a client that is still there, and nothing waits out
// the deadline.
TEST_F(S3AdapterTest, DestroyedWhileListingOnAFrozenGateway) {
  S3AdapterConfig config = Config();
  config.client.request_timeout = std::chrono::milliseconds(30000);
  ASSERT_TRUE(gateway_->PauseGateway());
  const auto start = std::chrono::steady_clock::now();
  {
    auto adapter = Make(config);
    ASSERT_NE(adapter, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(adapter->listing_done());
  }
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(gateway_->ResumeGateway());
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST_F(S3AdapterTest, CapacityEvictsTheLeastRecentlyUsed) {
  S3AdapterConfig config = Config();
  // Room for three objects with their headers, not four.
  config.max_capacity_bytes = 3 * (kObjectBytes + 512);
  auto adapter = Make(config);
  ASSERT_NE(adapter, nullptr);
  std::vector<store::ObjectKey> removed;
  adapter->ObserveRemovals([&](std::span<const store::ObjectKey> keys) {
    removed.insert(removed.end(), keys.begin(), keys.end());
  });
  // One at a time: within one batch, reservations not yet committed are not
  // evictable, and a batch past the capacity is refused in part instead.
  for (int i = 0; i < 5; ++i) StoreN(*adapter, i, 1);
  const L2AdapterStats s = adapter->Stats();
  EXPECT_EQ(s.objects, 3u);
  EXPECT_EQ(s.evicted_objects, 2u);
  EXPECT_LE(s.usage_bytes, config.max_capacity_bytes);
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(removed[0], KeyN(0));
  EXPECT_EQ(removed[1], KeyN(1));
  auto raw = RawClient();
  ASSERT_TRUE(lmcache::testing::WaitUntil([&] { return Head(*raw, KeyN(0)) == 404; }));
  EXPECT_EQ(Head(*raw, KeyN(4)), 200);
}

TEST_F(S3AdapterTest, ConcurrentStoresLookupsAndLoads) {
  auto adapter = Make(Config());
  ASSERT_NE(adapter, nullptr);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::uint64_t first = 10'000 * (t + 1);
      const auto values = StoreN(*adapter, first, 8, 64 << 10);
      std::vector<store::ObjectKey> keys;
      for (int i = 0; i < 8; ++i) keys.push_back(KeyN(first + i));
      for (int round = 0; round < 3; ++round) {
        const auto found = adapter->LookupAndLock(keys);
        std::vector<std::vector<std::byte>> out;
        const auto outcomes = LoadN(*adapter, first, 8, &out, 64 << 10);
        adapter->Unlock(keys);
        for (int i = 0; i < 8; ++i) {
          if (!found[i] || outcomes[i] != L2LoadOutcome::kLoaded || out[i] != values[i]) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace lmcache::tier
