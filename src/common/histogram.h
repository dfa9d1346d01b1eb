// LatencyHistogram: a fixed-bucket histogram of durations, lock-free.
//
// Buckets are cumulative-friendly upper bounds from 50 us to 10 s (the
// Prometheus convention: a snapshot renders directly as _bucket{le=...}),
// plus the count and the sum, so a mean and quantile estimates can be
// derived. Recording is two relaxed atomic adds.
// Thread-safety: Record and Snapshot from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace lmcache {

class LatencyHistogram {
 public:
  // Upper bounds in microseconds; the last bucket (+Inf) is implicit.
  static constexpr std::array<std::uint64_t, 17> kBoundsUs = {
      50,     100,    250,     500,     1000,    2500,    5000,     10000,   25000,
      50000,  100000, 250000,  500000,  1000000, 2500000, 5000000, 10000000};

  struct Snapshot {
    std::array<std::uint64_t, kBoundsUs.size() + 1> buckets{};  // per bucket, not cumulative
    std::uint64_t count = 0;
    std::uint64_t sum_us = 0;
  };

  // The time from `start` to `now`, to the nearest microsecond (a stage of
  // tens of microseconds would be biased by truncation).
  void RecordSince(std::chrono::steady_clock::time_point start,
                   std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count();
    Record(ns <= 0 ? 0 : static_cast<std::uint64_t>((ns + 500) / 1000));
  }

  void Record(std::uint64_t micros) {
    std::size_t i = 0;
    while (i < kBoundsUs.size() && micros > kBoundsUs[i]) ++i;
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    sum_us_.fetch_add(micros, std::memory_order_relaxed);
  }

  Snapshot Take() const {
    Snapshot s;
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
      s.count += s.buckets[i];
    }
    s.sum_us = sum_us_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<std::uint64_t>, kBoundsUs.size() + 1> buckets_{};
  std::atomic<std::uint64_t> sum_us_{0};
};

}  // namespace lmcache
