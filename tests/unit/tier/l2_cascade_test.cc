// L2Cascade: the adapter list that changes under traffic. A View is a
// snapshot that keeps its adapters alive; a removed adapter is destroyed
// only once no View holds it (on Remove's thread, or a later Reap's), its
// farewell first; names are unique and never move to another adapter.
#include "tier/l2_cascade.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tier/forwarding_adapter.h"
#include "tier/mock/mock_adapter.h"

namespace lmcache::tier {
namespace {

using namespace std::chrono_literals;

// A mock that says when it is destroyed, and on which thread.
class TracedAdapter final : public ForwardingAdapter {
 public:
  TracedAdapter(std::atomic<int>* destroyed, std::thread::id* on)
      : ForwardingAdapter(std::make_unique<MockAdapter>(MockAdapterConfig{})),
        destroyed_(destroyed),
        on_(on) {}
  ~TracedAdapter() override {
    if (on_ != nullptr) *on_ = std::this_thread::get_id();
    destroyed_->fetch_add(1);
  }

 private:
  std::atomic<int>* destroyed_;
  std::thread::id* on_;
};

// An addition's name, position and farewell (the rest as the cascade's default).
L2Cascade::Addition As(std::string name, std::optional<std::size_t> position,
                       std::function<void(L2Adapter&)> farewell) {
  L2Cascade::Addition addition;
  addition.name = std::move(name);
  addition.position = position;
  addition.farewell = std::move(farewell);
  return addition;
}

std::vector<std::string> Names(const L2Cascade::View& view) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < view.size(); ++i) names.push_back(view.member(i).name);
  return names;
}

TEST(L2Cascade, NamesAreMadeOrGivenAndNeverReused) {
  std::atomic<int> destroyed{0};
  L2Cascade cascade;
  ASSERT_EQ(*cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), {}), "mock-1");
  ASSERT_EQ(*cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                            As("warm", std::nullopt, nullptr)),
            "warm");
  ASSERT_EQ(
      *cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), As("", 0, nullptr)),
      "mock-3");
  EXPECT_EQ(Names(cascade.Current()), (std::vector<std::string>{"mock-3", "mock-1", "warm"}));

  // A taken name, a malformed one, a position past the end: refused, nothing changes.
  auto taken = cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                              As("warm", std::nullopt, nullptr));
  EXPECT_EQ(taken.status().code(), ErrorCode::kAlreadyExists);
  for (const char* bad : {"1", "fs#1", "has space", "-lead", "x/y"}) {
    auto refused = cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                                  As(bad, std::nullopt, nullptr));
    EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidConfig) << bad;
  }
  auto past =
      cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), As("", 4, nullptr));
  EXPECT_EQ(past.status().code(), ErrorCode::kInvalidConfig);
  EXPECT_EQ(destroyed.load(), 7) << "each refused adapter was destroyed at once";
  EXPECT_EQ(cascade.Current().size(), 3u);

  // mock-1 removed: the next made name counts on; a removed name may be
  // given again once its adapter is gone.
  ASSERT_EQ(cascade.Remove("mock-1", 1s)->drained, L2Cascade::Drained::kDrained);
  EXPECT_EQ(*cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), {}), "mock-4");
  ASSERT_EQ(cascade.Remove("warm", 1s)->drained, L2Cascade::Drained::kDrained);
  EXPECT_EQ(*cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                            As("warm", std::nullopt, nullptr)),
            "warm");
  EXPECT_EQ(cascade.Remove("nothing", 1s).status().code(), ErrorCode::kNotFound);
}

// A made name needs no escaping in a URL (fs#2 was a fragment to curl: a
// DELETE of /config/adapters/fs#2 named /config/adapters/fs), and steps past
// one an operator gave.
TEST(L2Cascade, AMadeNameNeedsNoEscapingAndStepsPastAGivenOne) {
  std::atomic<int> destroyed{0};
  L2Cascade cascade;
  ASSERT_EQ(*cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                            As("mock-2", std::nullopt, nullptr)),
            "mock-2");
  const auto made = cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), {});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(*made, "mock-3");
  EXPECT_EQ(made->find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-"), std::string::npos);
}

TEST(L2Cascade, AViewKeepsWhatItSawAndRemoveWaitsForItToEnd) {
  std::atomic<int> destroyed{0};
  std::thread::id destroyed_on;
  int farewells = 0;
  L2Cascade cascade;
  ASSERT_TRUE(cascade
                  .Insert(std::make_unique<TracedAdapter>(&destroyed, &destroyed_on),
                          As("leaving", std::nullopt, [&](L2Adapter&) { ++farewells; }))
                  .ok());
  ASSERT_TRUE(cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), {}).ok());

  auto held = std::make_unique<L2Cascade::View>(cascade.Current());  // a load in flight
  std::atomic<bool> dropped{false};
  std::thread in_flight([&] {
    std::this_thread::sleep_for(200ms);
    // Still usable while held, though no longer in the cascade.
    EXPECT_EQ(held->member(0).name, "leaving");
    EXPECT_EQ(held->adapter(0).Stats().type, "mock");
    EXPECT_EQ(destroyed.load(), 0);
    dropped = true;
    held.reset();
  });
  const auto removal = cascade.Remove("leaving", 30s);
  in_flight.join();
  ASSERT_TRUE(removal.ok());
  EXPECT_EQ(removal->drained, L2Cascade::Drained::kDrained);
  EXPECT_TRUE(dropped.load()) << "Remove returned before the View holding the adapter ended";
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(destroyed_on, std::this_thread::get_id()) << "destroyed on Remove's thread";
  EXPECT_EQ(farewells, 1);
  EXPECT_EQ(Names(cascade.Current()), (std::vector<std::string>{"mock-2"}));
}

TEST(L2Cascade, PastTheDrainTimeoutAReapDestroysItOnceItsLastViewEnds) {
  std::atomic<int> destroyed{0};
  std::thread::id destroyed_on;
  int farewells = 0;
  L2Cascade cascade;
  ASSERT_TRUE(cascade
                  .Insert(std::make_unique<TracedAdapter>(&destroyed, &destroyed_on),
                          As("stuck", std::nullopt, [&](L2Adapter&) { ++farewells; }))
                  .ok());
  auto held = std::make_unique<L2Cascade::View>(cascade.Current());
  const auto removal = cascade.Remove("stuck", 0ms);
  ASSERT_TRUE(removal.ok());
  EXPECT_EQ(removal->drained, L2Cascade::Drained::kDraining);
  EXPECT_TRUE(cascade.Current().empty());
  EXPECT_EQ(cascade.Draining(), (std::vector<std::string>{"stuck"}));
  EXPECT_EQ(cascade.Reap(), 1u) << "still held";
  EXPECT_EQ(cascade.Draining(), (std::vector<std::string>{"stuck"}));
  // The name stays taken while it drains (an fs directory is still open).
  EXPECT_EQ(cascade
                .Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                        As("stuck", std::nullopt, nullptr))
                .status()
                .code(),
            ErrorCode::kAlreadyExists);
  EXPECT_EQ(destroyed.load(), 1) << "only the refused one";

  // The last View ends on another thread: the adapter is not destroyed there.
  std::thread([&] { held.reset(); }).join();
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_TRUE(cascade.Draining().empty()) << "drained: it only waits to be closed";
  EXPECT_EQ(cascade.Reap(), 0u);
  EXPECT_EQ(destroyed.load(), 2);
  EXPECT_EQ(destroyed_on, std::this_thread::get_id());
  EXPECT_EQ(farewells, 1);
  EXPECT_TRUE(cascade.Draining().empty());
}

TEST(L2Cascade, TwoAdaptersNeverShareWhatOneHoldsExclusively) {
  std::atomic<int> destroyed{0};
  L2Cascade cascade;
  L2Cascade::Addition first = As("a", std::nullopt, nullptr);
  first.exclusive = "fs:/data/l2";
  ASSERT_TRUE(cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), first).ok());
  EXPECT_EQ(cascade.Holder("fs:/data/l2"), "a");
  L2Cascade::Addition second = As("b", std::nullopt, nullptr);
  second.exclusive = "fs:/data/l2";
  auto refused = cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), second);
  EXPECT_EQ(refused.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("a already stores there"), std::string::npos)
      << refused.status().message();
  // Held while it drains too; free once it is closed.
  {
    const auto held = cascade.Current();
    ASSERT_EQ(cascade.Remove("a", 0ms)->drained, L2Cascade::Drained::kDraining);
    EXPECT_EQ(cascade.Holder("fs:/data/l2"), "a");
  }
  EXPECT_EQ(cascade.Reap(), 0u);
  EXPECT_FALSE(cascade.Holder("fs:/data/l2").has_value());
  EXPECT_TRUE(cascade.Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr), second).ok());
}

TEST(L2Cascade, ItsEndClosesEveryAdapterWithoutAFarewell) {
  std::atomic<int> destroyed{0};
  int farewells = 0;
  {
    L2Cascade cascade;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(cascade
                      .Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                              As("", std::nullopt, [&](L2Adapter&) { ++farewells; }))
                      .ok());
    }
    {
      auto held = cascade.Current();
      ASSERT_EQ(cascade.Remove("mock-2", 0ms)->drained, L2Cascade::Drained::kDraining);
    }
  }
  EXPECT_EQ(destroyed.load(), 3);
  EXPECT_EQ(farewells, 0) << "a server stopping keeps what its tiers hold: nothing is announced";
}

// A peer source only reads: while it is the only adapter, nothing takes stores.
class ReadOnlySource final : public ForwardingAdapter {
 public:
  ReadOnlySource() : ForwardingAdapter(std::make_unique<MockAdapter>(MockAdapterConfig{})) {}
  bool TakesStores() const override { return false; }
};

TEST(L2Cascade, TakesStoresFollowsTheList) {
  L2Cascade cascade;
  EXPECT_FALSE(cascade.TakesStores());
  ASSERT_TRUE(
      cascade.Insert(std::make_unique<ReadOnlySource>(), As("peers", std::nullopt, nullptr)).ok());
  EXPECT_FALSE(cascade.TakesStores());
  ASSERT_TRUE(cascade.Insert(std::make_unique<MockAdapter>(MockAdapterConfig{}), {}).ok());
  EXPECT_TRUE(cascade.TakesStores());
  ASSERT_TRUE(cascade.Remove("mock-2", 1s).ok());
  EXPECT_FALSE(cascade.TakesStores());
}

TEST(L2Cascade, BorrowingNeverDestroysWhatItWasLent) {
  MockAdapter a{MockAdapterConfig{}}, b{MockAdapterConfig{}};
  {
    auto cascade = L2Cascade::Borrowing({&a, &b});
    const auto view = cascade->Current();
    ASSERT_EQ(view.size(), 2u);
    EXPECT_EQ(&view.adapter(0), &a);
    EXPECT_EQ(&view.adapter(1), &b);
    EXPECT_EQ(Names(view), (std::vector<std::string>{"mock-1", "mock-2"}));
  }
  EXPECT_EQ(a.Stats().type, "mock") << "still alive";
}

// Views taken while the list changes from another thread each see a whole
// list, and every adapter removed is destroyed exactly once (TSan runs this).
TEST(L2Cascade, ViewsTakenDuringChangesAreConsistent) {
  std::atomic<int> destroyed{0};
  L2Cascade cascade;
  ASSERT_TRUE(cascade
                  .Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                          As("base", std::nullopt, nullptr))
                  .ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const L2Cascade::View view = cascade.Current();
        ASSERT_GE(view.size(), 1u);
        ASSERT_TRUE(view.Find("base").has_value());
        for (std::size_t i = 0; i < view.size(); ++i) (void)view.adapter(i).Stats();
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(cascade
                    .Insert(std::make_unique<TracedAdapter>(&destroyed, nullptr),
                            As("extra", static_cast<std::size_t>(i % 2), nullptr))
                    .ok());
    ASSERT_TRUE(cascade.Remove("extra", 30s).ok());
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(cascade.Reap(), 0u);
  EXPECT_EQ(destroyed.load(), 200);
}

}  // namespace
}  // namespace lmcache::tier
