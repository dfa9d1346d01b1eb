// Regression of issue 7 finding 5: a request must not cost memory far beyond
// its size. Every heap allocation of this test binary is counted (current and
// peak bytes, through a replaced malloc), and each request's peak is compared
// with its own size.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <malloc.h>
#include <new>

#include "fakes/service_harness.h"

namespace {

std::atomic<std::int64_t> g_current{0};
std::atomic<std::int64_t> g_peak{0};

void Account(std::int64_t delta) {
  const std::int64_t now = g_current.fetch_add(delta, std::memory_order_relaxed) + delta;
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Peak heap growth (bytes above the starting level) while `fn` runs, and the
// growth left behind when it returns.
template <typename Fn>
std::pair<std::int64_t, std::int64_t> Measure(Fn fn) {
  const std::int64_t start = g_current.load();
  g_peak.store(start);
  fn();
  return {g_peak.load() - start, g_current.load() - start};
}

}  // namespace

// malloc itself is replaced (glibc's own entry points do the work), so every
// allocation counts: operator new's and those of C libraries (msgpack-c's zones).
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t size) {
  void* p = __libc_malloc(size);
  if (p != nullptr) Account(static_cast<std::int64_t>(malloc_usable_size(p)));
  return p;
}
void* calloc(std::size_t n, std::size_t size) {
  void* p = __libc_calloc(n, size);
  if (p != nullptr) Account(static_cast<std::int64_t>(malloc_usable_size(p)));
  return p;
}
void* realloc(void* old, std::size_t size) {
  const std::int64_t before = old != nullptr ? static_cast<std::int64_t>(malloc_usable_size(old)) : 0;
  void* p = __libc_realloc(old, size);
  if (p != nullptr || size == 0) {
    Account((p != nullptr ? static_cast<std::int64_t>(malloc_usable_size(p)) : 0) - before);
  }
  return p;
}
void free(void* p) {
  if (p == nullptr) return;
  Account(-static_cast<std::int64_t>(malloc_usable_size(p)));
  __libc_free(p);
}
}

namespace lmcache::server {
namespace {

using testing::IntFrame;
using testing::KeyArgs;
using testing::KeyFrame;
using testing::RegisterFrame;

constexpr std::int64_t kMiB = 1 << 20;

// An array of `bytes / 5` five-byte uint32 items (few enough items for any
// item-count limit, so only the decoder's way of reading them matters).
std::string IntArray(std::size_t bytes) {
  const std::size_t items = bytes / 5;
  std::string out = msgpk::Encoder().Array(static_cast<std::uint32_t>(items)).Take();
  const char item[5] = {static_cast<char>(0xce), 0x12, 0x34, 0x56, 0x78};
  out.reserve(out.size() + items * 5);
  for (std::size_t i = 0; i < items; ++i) out.append(item, 5);
  return out;
}

TEST(Issue7Amplification, AHugePingPayloadCostsNothing) {
  testing::ServiceHarness h;
  std::vector<std::string> frames;
  frames.push_back(IntArray(60u << 20));  // just under the 64 MiB frame limit
  Status status;
  const auto [peak, kept] = Measure([&] { status = h.Call("ping", std::move(frames)).status; });
  EXPECT_FALSE(status.ok());
  EXPECT_LT(peak, 70 * kMiB) << "the request itself is 60 MiB; decoding it may not add more";
  EXPECT_LT(kept, kMiB);
}

TEST(Issue7Amplification, ARegistrationCarryingABigArrayKeepsNothing) {
  testing::ServiceHarness h;
  // A registration with an unknown 37 MiB field (an array of ints).
  std::string frame = RegisterFrame(1);
  frame[0] = static_cast<char>(0x89);  // fixmap of 8 entries -> 9
  frame += msgpk::Encoder().Str("extra").Take() + IntArray(37u << 20);
  std::vector<std::string> frames;
  frames.push_back(std::move(frame));
  const auto [peak, kept] = Measure(
      [&] { (void)h.Call("register_kv_cache_engine_driven_context", std::move(frames)); });
  EXPECT_LT(peak, 45 * kMiB) << "the request itself is 37 MiB";
  EXPECT_LT(kept, kMiB);
}

TEST(Issue7Amplification, AWideLookupCostsMemoryInProportionToItsSize) {
  testing::ServiceHarness h;
  const std::string model(1000, 'm');
  ASSERT_TRUE(h.Call("register_kv_cache_engine_driven_context", {RegisterFrame(1, model, 255)})
                  .status.ok());
  KeyArgs key;
  key.model = model;
  key.world_size = 255;
  key.worker_id.reset();
  key.tokens.assign(524288, 1);  // one byte each on the wire: a 0.5 MiB key
  key.end = 524288;
  key.request_id = "wide";
  std::vector<std::string> frames{KeyFrame(key), IntFrame(255)};
  key.tokens.clear();
  key.tokens.shrink_to_fit();
  ASSERT_LT(frames[0].size(), static_cast<std::size_t>(kMiB));
  Status status;
  const auto [peak, kept] = Measure([&] { status = h.Call("lookup", std::move(frames)).status; });
  EXPECT_TRUE(status.ok()) << status.ToString();
  // 2 MiB of decoded tokens, 64 KiB of chunk hashes, a bounded window of keys;
  // expanding all 2048 chunks x 255 ranks with the model name would be 560 MiB.
  EXPECT_LT(peak, 24 * kMiB);
  EXPECT_LT(kept, 2 * kMiB);  // the session keeps the prompt's hashes, not its tokens
}

}  // namespace
}  // namespace lmcache::server
