#include "tier/metered_adapter.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace lmcache::tier {

class MeteredAdapter::Meter {
 public:
  Meter(std::atomic<std::uint64_t>* in_flight, LatencyHistogram* latency, std::uint64_t objects)
      : in_flight_(in_flight),
        latency_(latency),
        objects_(objects),
        start_(std::chrono::steady_clock::now()) {
    in_flight_->fetch_add(objects_, std::memory_order_relaxed);
  }
  ~Meter() {
    in_flight_->fetch_sub(objects_, std::memory_order_relaxed);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - start_);
    latency_->Record(static_cast<std::uint64_t>(us.count()));
  }
  Meter(const Meter&) = delete;
  Meter& operator=(const Meter&) = delete;

 private:
  std::atomic<std::uint64_t>* in_flight_;
  LatencyHistogram* latency_;
  std::uint64_t objects_;
  std::chrono::steady_clock::time_point start_;
};

MeteredAdapter::MeteredAdapter(std::unique_ptr<L2Adapter> inner)
    : ForwardingAdapter(std::move(inner)) {}

void MeteredAdapter::SubmitStore(std::span<const L2Write> objects, StoreDone done) {
  auto meter =
      std::make_shared<Meter>(&meters_.storing_objects, &meters_.store_latency, objects.size());
  ForwardingAdapter::SubmitStore(objects, [meter, done = std::move(done)](std::vector<Status> s) mutable {
    meter.reset();  // measured to the completion, before the caller sees it
    done(std::move(s));
  });
}

std::vector<bool> MeteredAdapter::LookupAndLock(std::span<const store::ObjectKey> keys) {
  Meter meter(&meters_.looking_up_keys, &meters_.lookup_latency, keys.size());
  return ForwardingAdapter::LookupAndLock(keys);
}

void MeteredAdapter::SubmitLookup(std::span<const store::ObjectKey> keys,
                                  std::uint64_t object_bytes, LookupDone done) {
  auto meter =
      std::make_shared<Meter>(&meters_.looking_up_keys, &meters_.lookup_latency, keys.size());
  ForwardingAdapter::SubmitLookup(keys, object_bytes,
                                  [meter, done = std::move(done)](std::vector<bool> found) mutable {
                                    meter.reset();
                                    done(std::move(found));
                                  });
}

void MeteredAdapter::SubmitLoad(std::span<const L2Read> reads, LoadDone done) {
  auto meter =
      std::make_shared<Meter>(&meters_.loading_objects, &meters_.load_latency, reads.size());
  const auto start = std::chrono::steady_clock::now();
  ForwardingAdapter::SubmitLoad(
      reads, [this, meter, start, done = std::move(done)](std::vector<L2LoadOutcome> o) mutable {
        meter.reset();
        // Per object loaded: a call that loaded nothing (misses, a dead
        // backend) says nothing of what a load costs.
        const auto loaded =
            static_cast<std::uint64_t>(std::count(o.begin(), o.end(), L2LoadOutcome::kLoaded));
        const auto now = std::chrono::steady_clock::now();
        cost_.Record(loaded, now - start, now);
        done(std::move(o));
      });
}

L2AdapterStats MeteredAdapter::Stats() const {
  L2AdapterStats s = ForwardingAdapter::Stats();
  meters_.CopyTo(&s);
  s.load_seconds_per_object = cost_.SecondsPerObject(std::chrono::steady_clock::now()).value_or(0);
  s.declined_slower_than_recompute = cost_.declined();
  return s;
}

}  // namespace lmcache::tier
