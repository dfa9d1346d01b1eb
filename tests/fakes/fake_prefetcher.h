// FakePrefetcher: a Prefetcher whose loads finish when the test says so.
// Complete(handle, n) "loads" the first n chunks of the request into L1
// (staged, then admitted already read-locked for the request's owner and
// readers, as a real L2 prefetch must leave them).
// Thread-safety: internally synchronised.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "store/object_table.h"
#include "tier/prefetcher.h"

namespace lmcache::testing {

class FakePrefetcher final : public tier::Prefetcher {
 public:
  explicit FakePrefetcher(std::uint64_t object_bytes) : object_bytes_(object_bytes) {}
  // The table loads land in (the service's, built after the fake).
  void Attach(store::ObjectTable* table) { table_ = table; }

  tier::PrefetchHandle Submit(tier::PrefetchRequest request) override {
    std::lock_guard<std::mutex> lock(mu_);
    const tier::PrefetchHandle handle = ++next_;
    jobs_[handle] = Job{std::move(request), std::nullopt, std::nullopt, {}};
    return handle;
  }
  std::optional<tier::PrefetchResult> Poll(tier::PrefetchHandle handle) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end() || !it->second.landed) return std::nullopt;
    const tier::PrefetchResult landed = *it->second.landed;
    jobs_.erase(it);
    return landed;
  }
  // Nothing until the test says what the lookups found (SetLookupHits), or the job landed.
  std::optional<std::size_t> LookupHits(tier::PrefetchHandle handle) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(handle);
    if (it == jobs_.end()) return 0;
    if (it->second.landed) return it->second.landed->chunks;
    return it->second.lookup_hits;
  }
  void SetLookupHits(tier::PrefetchHandle handle, std::size_t chunks) {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.at(handle).lookup_hits = chunks;
  }
  // As the controller: at once when landed or unknown, else when Complete()
  // or Cancel() ends the job (on the test's thread).
  void NotifyWhenLanded(tier::PrefetchHandle handle, std::function<void()> landed) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = jobs_.find(handle);
      if (it != jobs_.end() && !it->second.landed) {
        it->second.on_landed.push_back(std::move(landed));
        return;
      }
    }
    landed();
  }
  void Cancel(tier::PrefetchHandle handle) override {
    std::vector<std::function<void()>> landed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = jobs_.find(handle);
      if (it == jobs_.end()) return;
      if (it->second.landed) table_->ReleaseRead(it->second.landed->lease);
      landed.swap(it->second.on_landed);
      jobs_.erase(it);
      cancelled_ += 1;
    }
    for (auto& fn : landed) fn();
  }
  // Waits parked on the job now.
  std::size_t watchers(tier::PrefetchHandle handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(handle);
    return it == jobs_.end() ? 0 : it->second.on_landed.size();
  }

  // Loads the first `chunks` chunks of job `handle` into L1, read-locked;
  // then whoever waits for it hears.
  void Complete(tier::PrefetchHandle handle, std::size_t chunks) {
    std::vector<std::function<void()>> landed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Load(jobs_.at(handle), chunks);
      landed.swap(jobs_.at(handle).on_landed);
    }
    for (auto& fn : landed) fn();
  }
  tier::PrefetchRequest request(tier::PrefetchHandle handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.at(handle).request;
  }
  tier::PrefetchHandle last_handle() const {
    std::lock_guard<std::mutex> lock(mu_);
    return next_;
  }
  std::size_t pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size();
  }
  std::size_t cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  struct Job {
    tier::PrefetchRequest request;
    std::optional<tier::PrefetchResult> landed;
    std::optional<std::size_t> lookup_hits;
    std::vector<std::function<void()>> on_landed;
  };
  store::ObjectTable* table_ = nullptr;
  const std::uint64_t object_bytes_;
  mutable std::mutex mu_;
  tier::PrefetchHandle next_ = 0;
  std::map<tier::PrefetchHandle, Job> jobs_;
  std::size_t cancelled_ = 0;

  void Load(Job& job, std::size_t chunks) {
    const std::vector<store::ObjectKey> keys(
        job.request.keys.begin(),
        job.request.keys.begin() + static_cast<std::ptrdiff_t>(chunks * job.request.ranks));
    const store::Owner loader = store::Owner::Internal(0x4c32);  // "L2"
    auto staged =
        table_->ReserveWrite(keys, object_bytes_, loader, store::AllocationMode::kAllOrNothing);
    auto locked = table_->FinishWriteAndRead(staged->lease, job.request.owner, job.request.readers);
    job.landed = tier::PrefetchResult{chunks, locked->lease};
  }
};

}  // namespace lmcache::testing
