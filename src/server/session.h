// Sessions: per-request state shared by the scheduler's and the workers' calls
// (spec 5.3), keyed by request_id.
//
// A session caches the prompt's rolling chunk hashes (so the lookup, every
// worker's store and retrieve hash each chunk once) and the state of the last
// lookup (how many chunks were hit and locked, which ranges free_lookup_locks
// already released, so a repeated free never releases twice). Unlike the
// reference, a session expires after `ttl` of *disuse*, not `ttl` after its
// creation, so a long request keeps its state.
//
// Thread-safety: SessionManager is internally synchronised. A Session is
// shared (shared_ptr) and guarded by its own mutex `mu`; callers hold it while
// they read or change the session. Lock order: SessionManager::mu_ is never
// held while a Session::mu is taken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "store/object_key.h"

namespace lmcache::server {

struct LookupState {
  bool active = false;
  std::string model_name;
  std::int64_t world_size = 0;
  std::string cache_salt;
  std::uint32_t readers = 0;             // read locks per object
  std::vector<store::ChunkHash> hashes;  // every full chunk of the looked-up prompt
  std::size_t hit_chunks = 0;            // leading chunks found and locked on every rank
  bool prefetch_pending = false;         // L2 is still loading chunks after the L1 prefix
  std::uint64_t prefetch_handle = 0;
  bool status_consumed = false;       // query/wait_prefetch_status returned the result
  std::vector<bool> lookup_released;  // per hit chunk: free_lookup_locks released it
};

class Session {
 public:
  Mutex mu;

  // Replaces the prompt (keeping cached hashes of the unchanged full-chunk
  // prefix) and returns the hashes of chunks [first, last).
  std::vector<store::ChunkHash> Hashes(const std::vector<std::uint32_t>& tokens,
                                       std::size_t chunk_size, std::size_t first, std::size_t last)
      LMC_REQUIRES(mu);
  LookupState& lookup() LMC_REQUIRES(mu) { return lookup_; }

 private:
  std::vector<std::uint32_t> tokens_ LMC_GUARDED_BY(mu);
  std::vector<store::ChunkHash> hashes_ LMC_GUARDED_BY(mu);  // hashes_[i] = chunk i
  LookupState lookup_ LMC_GUARDED_BY(mu);
};

class SessionManager {
 public:
  SessionManager(const Clock* clock, TimeMs idle_ttl_ms, std::size_t max_sessions);

  // The session of `request_id`, created when missing; refreshes its last use.
  // Fails only when `max_sessions` sessions exist and none has expired.
  std::shared_ptr<Session> GetOrCreate(const std::string& request_id) LMC_EXCLUDES(mu_);
  // The session if it exists (refreshing its last use), else nullptr.
  std::shared_ptr<Session> Find(const std::string& request_id) LMC_EXCLUDES(mu_);
  // Removes and returns the session, nullptr if none.
  std::shared_ptr<Session> Remove(const std::string& request_id) LMC_EXCLUDES(mu_);
  // Drops sessions idle for the TTL or longer; returns how many.
  std::size_t ExpireIdle() LMC_EXCLUDES(mu_);
  std::size_t size() const LMC_EXCLUDES(mu_);

 private:
  struct Entry {
    std::shared_ptr<Session> session;
    TimeMs last_used_ms = 0;
  };
  std::size_t ExpireIdleLocked(TimeMs now) LMC_REQUIRES(mu_);

  const Clock* const clock_;
  const TimeMs idle_ttl_ms_;
  const std::size_t max_sessions_;
  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> sessions_ LMC_GUARDED_BY(mu_);
};

}  // namespace lmcache::server
