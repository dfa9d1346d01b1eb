// BlockingPolicy: an LRU eviction policy that, once armed, parks the next
// caller of Candidates() (an eviction, such as a store's on-demand eviction)
// until the test releases it, so a test can act while a request is inside
// the object table at a known point.
// Thread-safety: internally synchronised.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "store/eviction_policy.h"

namespace lmcache::testing {

class BlockingPolicy final : public store::EvictionPolicy {
 public:
  std::string_view name() const override { return "blocking-LRU"; }
  void OnAdmitted(std::span<const store::ObjectKey> keys) override { lru_.OnAdmitted(keys); }
  void OnAccessed(std::span<const store::ObjectKey> keys) override { lru_.OnAccessed(keys); }
  void OnRemoved(std::span<const store::ObjectKey> keys) override { lru_.OnRemoved(keys); }
  std::size_t size() const override { return lru_.size(); }
  std::vector<store::ObjectKey> TenantCandidates(std::string_view salt, std::size_t skip,
                                                 std::size_t max) const override {
    return lru_.TenantCandidates(salt, skip, max);
  }
  std::vector<store::ObjectKey> Candidates(std::size_t skip, std::size_t max) const override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (armed_) {
        armed_ = false;
        parked_ = true;
        cv_.notify_all();
        cv_.wait(lock, [this] { return !parked_; });
      }
    }
    return lru_.Candidates(skip, max);
  }
  std::vector<store::UsedCandidate> UsedCandidates(std::size_t skip,
                                                   std::size_t max) const override {
    return lru_.UsedCandidates(skip, max);
  }

  void Arm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
  }
  // False when nothing parked within `timeout` (the test then fails instead of hanging).
  bool WaitParked(std::chrono::seconds timeout = std::chrono::seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return parked_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    parked_ = false;
    cv_.notify_all();
  }

 private:
  store::LruPolicy lru_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool armed_ = false;
  mutable bool parked_ = false;
};

}  // namespace lmcache::testing
