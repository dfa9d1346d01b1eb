// ForwardingAdapter: a decorator built on it passes every call it does not
// override to the adapter it wraps, with the arguments it was given, and the
// two decorators the server uses (metering, fault injection) do so for the
// calls they leave alone.
#include "tier/forwarding_adapter.h"

#include <gtest/gtest.h>

#include <vector>

#include "fakes/keys.h"
#include "tier/fault/fault_adapter.h"
#include "tier/metered_adapter.h"

namespace lmcache::tier {
namespace {

using testing::KeyN;

// Records which calls reached it and with how many items.
struct CallLog {
  std::vector<std::string> calls;
};

class RecordingAdapter final : public L2Adapter {
 public:
  explicit RecordingAdapter(CallLog* log) : log_(log) {}
  Status AttachMemory(std::span<std::byte> pool) override {
    Record("attach", pool.size());
    return Status::Ok();
  }
  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override {
    Record("store", objects.size());
    done(std::vector<Status>(objects.size()));
  }
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override {
    Record("lookup", keys.size());
    return std::vector<bool>(keys.size(), true);
  }
  void Unlock(std::span<const store::ObjectKey> keys) override { Record("unlock", keys.size()); }
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override {
    Record("load", reads.size());
    done(std::vector<L2LoadOutcome>(reads.size(), L2LoadOutcome::kMissing));
  }
  bool CompletesAsynchronously() const override { return true; }
  L2AdapterStats Stats() const override {
    L2AdapterStats s;
    s.type = "recording";
    s.objects = 7;
    return s;
  }

 private:
  void Record(const char* call, std::size_t n) {
    log_->calls.push_back(std::string(call) + ":" + std::to_string(n));
  }
  CallLog* log_;
};

// Changes loads only.
class LoadsEverything final : public ForwardingAdapter {
 public:
  using ForwardingAdapter::ForwardingAdapter;
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override {
    done(std::vector<L2LoadOutcome>(reads.size(), L2LoadOutcome::kLoaded));
  }
};

void CallEverything(L2Adapter& adapter) {
  const std::vector<store::ObjectKey> keys = {KeyN(1), KeyN(2), KeyN(3)};
  std::vector<std::byte> bytes(16);
  std::vector<std::byte> pool(4096);
  EXPECT_TRUE(adapter.AttachMemory(pool).ok());
  EXPECT_TRUE(adapter.CompletesAsynchronously());
  const std::vector<L2Write> writes = {{&keys[0], bytes}, {&keys[1], bytes}};
  EXPECT_EQ(adapter.Store(writes).size(), 2u);
  EXPECT_EQ(adapter.LookupAndLock(keys), (std::vector<bool>{true, true, true}));
  adapter.Unlock(std::span(keys).first(1));
  const std::vector<L2Read> reads = {{&keys[2], bytes}};
  EXPECT_EQ(adapter.Load(reads).size(), 1u);
}

TEST(ForwardingAdapterTest, PassesEveryCallItDoesNotOverrideToTheInnerAdapter) {
  CallLog log;
  LoadsEverything decorator(std::make_unique<RecordingAdapter>(&log));
  CallEverything(decorator);
  EXPECT_EQ(log.calls, (std::vector<std::string>{"attach:4096", "store:2", "lookup:3", "unlock:1"}))
      << "loads are the decorator's own; the rest reach the inner adapter once each";
  const std::vector<store::ObjectKey> keys = {KeyN(9)};
  std::vector<std::byte> out(4);
  const std::vector<L2Read> reads = {{&keys[0], out}};
  EXPECT_EQ(decorator.Load(reads), std::vector<L2LoadOutcome>{L2LoadOutcome::kLoaded});
  EXPECT_EQ(decorator.Stats().type, "recording");
  EXPECT_EQ(decorator.Stats().objects, 7u);
  EXPECT_EQ(&decorator.inner(), &static_cast<const ForwardingAdapter&>(decorator).inner());
}

TEST(ForwardingAdapterTest, TheServersDecoratorsForwardEveryCall) {
  CallLog metered_log;
  MeteredAdapter metered(std::make_unique<RecordingAdapter>(&metered_log));
  CallEverything(metered);
  CallLog fault_log;
  FaultAdapter faults(std::make_unique<RecordingAdapter>(&fault_log), FaultConfig{});
  CallEverything(faults);
  const std::vector<std::string> all = {"attach:4096", "store:2", "lookup:3", "unlock:1", "load:1"};
  EXPECT_EQ(metered_log.calls, all);
  EXPECT_EQ(fault_log.calls, all);
  EXPECT_EQ(metered.Stats().objects, 7u);
  EXPECT_EQ(faults.Stats().type, "fault_inject(recording)");
}

}  // namespace
}  // namespace lmcache::tier
