// S3Adapter: an L2 tier in an S3 bucket (`{"type":"s3",...}`; AWS S3, Ceph
// RGW, any S3-compatible store), shared by every server of a fleet that
// names the same bucket: what one stored, each finds.
//
// One object is one S3 object, named as the reference names it
// (s3_object_name.h), holding our header and payload (object_format.h) in
// one PUT: the PUT is the commit point, so a reader sees the whole object or
// nothing, and what it reads is verified against the key it asked for
// (length, XXH3 of header and payload) before a byte is handed on. A
// corrupt object is a counted miss and is deleted; another server's object
// of another geometry, or of a newer encoding, is a miss left alone.
//
// Every call goes through S3Client's event thread: Submit* return at once
// and complete from there (CompletesAsynchronously), so no controller
// thread waits on the network.
//
// What the adapter knows of the bucket is an L2Index: the objects it stored,
// found or listed. At startup it lists the bucket (ListObjectsV2 under
// key_prefix, in pages of 1000, at most max_listed_objects, in the
// background: serving does not wait). A lookup answers from the index, and
// asks the bucket (HEAD, `kLookupWindow` keys at a time, stopping at the
// first window with a miss: a prompt's prefix is what can load) for the
// keys the index does not hold, which is how a server finds what the rest of
// the fleet stored. While the gateway refuses connections (S3Client::down)
// a lookup holds nothing, so the cascade's next tier serves. Locks are the index's: eviction here never deletes what
// a load of this server has planned (another server's eviction can, and
// that load is then a miss: the prefetch serves the shorter prefix).
//
// Capacity: with max_capacity_gb, this server deletes the least recently
// used objects it knows of when a store would pass it; with 0 (the default,
// and the choice for a bucket a fleet shares) the bucket's own lifecycle
// rules bound it (an expiration rule on the prefix), and nothing is deleted
// here but corrupt objects.
//
// Thread-safety: internally synchronised; any number of threads may call it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/condition_log.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "tier/l2_adapter.h"
#include "tier/l2_index.h"
#include "tier/s3/s3_client.h"

namespace lmcache::tier {

struct S3AdapterConfig {
  S3ClientConfig client;
  std::string key_prefix;                // object names start with it ("" = the bucket's root)
  std::uint64_t max_capacity_bytes = 0;  // 0: the bucket's lifecycle rules bound it
  std::uint64_t max_listed_objects = 1'000'000;
  std::uint32_t list_page_objects = 1000;  // ListObjectsV2 max-keys (S3's own cap)
  std::string credentials_source;          // where the keys came from, for the description
};

class S3Adapter final : public L2Adapter {
 public:
  // Lookup HEADs in flight at once for one lookup.
  static constexpr std::size_t kLookupWindow = 32;

  // Starts the client and the listing; an unreachable gateway is a
  // condition (logged once), not an error: the server serves from L1 and
  // every later call tries again.
  static Result<std::unique_ptr<S3Adapter>> Create(const S3AdapterConfig& config);
  ~S3Adapter() override;

  void SubmitStore(std::span<const L2Write> objects, StoreDone done) override;
  std::vector<bool> LookupAndLock(std::span<const store::ObjectKey> keys) override;
  void SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                    LookupDone done) override;
  void Unlock(std::span<const store::ObjectKey> keys) override;
  void SubmitLoad(std::span<const L2Read> reads, LoadDone done) override;
  L2AdapterStats Stats() const override;
  bool CompletesAsynchronously() const override { return true; }
  void ObserveRemovals(RemovalObserver observer) override;
  void EnforceQuotas(const store::TenantLedger* ledger) override;
  Result<std::vector<ListedL2Object>> List(const store::ObjectKey* after, std::size_t limit,
                                           const KeyFilter& keep) const override;
  Result<std::vector<L2Deletion>> Delete(std::span<const store::ObjectKey> keys,
                                         bool force) override;

  // Whether the startup listing has ended (the tests wait for it).
  bool listing_done() const { return listing_done_.load(std::memory_order_acquire); }
  S3Client::Counters client_counters() const { return client_->counters(); }

 private:
  struct LookupState;
  struct ListingState;
  explicit S3Adapter(const S3AdapterConfig& config);

  std::string NameOf(const store::ObjectKey& key) const;
  void ContinueLookup(const std::shared_ptr<LookupState>& state);
  void ListPage(const std::shared_ptr<ListingState>& state, const std::string& continuation = {});
  void FinishListing(const std::shared_ptr<ListingState>& state);
  // Deletes `key` from the bucket (fire and forget: a failure leaves an
  // object that the next load finds corrupt or the lifecycle removes).
  void DeleteObject(const store::ObjectKey& key);
  void Evicted(const store::ObjectKey& key, std::uint64_t bytes);
  // Tells the KV event log that `key` is gone from the tier.
  void NotifyRemoved(const store::ObjectKey& key) LMC_EXCLUDES(observer_mu_);
  // The gateway's answer, as the adapter's condition: a refusal of our
  // credentials or an unreachable gateway is logged once, until it recovers.
  void Note(const S3Response& response);

  const S3AdapterConfig config_;
  L2Counters counters_;
  L2Index index_;
  ConditionLog condition_;
  RateLimitedLog corrupt_log_{std::chrono::seconds(10)};
  // Set while the startup listing may already be evicting (its trim runs on
  // the client's thread): read and written under its mutex.
  mutable Mutex observer_mu_;
  RemovalObserver removal_observer_ LMC_GUARDED_BY(observer_mu_);
  std::atomic<bool> listing_done_{false};
  // The startup listing's figures (rebuilt_objects, rebuild_seconds).
  struct Listed {
    std::uint64_t objects = 0;
    double seconds = 0;
  };
  mutable Mutex listed_mu_;
  Listed listed_ LMC_GUARDED_BY(listed_mu_);
  // Last: destroyed first, completing what is in flight while the rest lives.
  std::unique_ptr<S3Client> client_;
};

}  // namespace lmcache::tier
