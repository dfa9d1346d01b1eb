// WarmPrefetches: prompts an operator asks the server to load from L2 into
// L1 before their traffic arrives (POST /cache/prefetches, the reference's
// route: p2p-spec.md 13.2).
//
// A request names a prompt as a lookup does (model, world size, tokens,
// cache salt, tags) and needs a registered instance of that model and world
// size for the object layout (kWrongState otherwise: the reference's 409 "no
// layout"). The chunks after the prompt's L1 prefix go to the Prefetcher
// like a lookup's, bounded as every prefetch is (its in-flight limit and
// load timeout), under an internal owner; what lands is released at once:
// warm objects are retained in L1, unlocked, evictable like any other. The
// result (keys found in L1 afterwards, of the prompt's keys) is read once
// (Take), as the reference's is, then forgotten.
//
// Bounded: at most kMaxPending requests load at once (kResourceExhausted
// beyond), and at most kMaxUnread finished results wait to be read (the
// oldest unread is dropped).
//
// Thread-safety: internally synchronised; Submit and Take from any thread.
// A landing prefetch reports on the prefetcher's thread through a weak
// reference, so one that lands after this object is gone does nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "events/token_bindings.h"
#include "lmcache/status.h"
#include "store/object_table.h"
#include "tier/prefetcher.h"
#include "worker/chunk_hasher.h"
#include "worker/instances.h"

namespace lmcache::server {

struct WarmRequest {
  std::string model_name;
  std::int64_t world_size = 1;
  std::vector<std::uint32_t> token_ids;
  std::string cache_salt;
  std::map<std::string, std::string> tags;
};

struct WarmSubmitted {
  std::string request_id;
  std::size_t chunks = 0;  // the prompt's full chunks
  bool noop = false;       // nothing to load: all in L1 already, or no L2 tier
};

struct WarmProgress {
  bool done = false;
  std::size_t found_keys = 0;  // of the prompt's keys, in L1 once done
  std::size_t total_keys = 0;  // chunks x ranks
};

class WarmPrefetches {
 public:
  static constexpr std::size_t kMaxPending = 64;
  static constexpr std::size_t kMaxUnread = 1024;
  static constexpr std::size_t kMaxTokens = 1 << 20;

  struct Deps {
    store::ObjectTable& table;
    worker::InstanceRegistry& instances;
    worker::ChunkHasher& hasher;
    tier::Prefetcher* prefetcher;           // null without an L2 tier
    events::TokenBindings* token_bindings;  // null without KV events
  };
  explicit WarmPrefetches(const Deps& deps);
  ~WarmPrefetches();  // cancels what still loads
  WarmPrefetches(const WarmPrefetches&) = delete;
  WarmPrefetches& operator=(const WarmPrefetches&) = delete;

  // kInvalidArgument (bad request), kWrongState (no instance of that model
  // and world size registered), kResourceExhausted (kMaxPending loading).
  Result<WarmSubmitted> Submit(const WarmRequest& request);
  // The request's progress; a finished one is forgotten once read. nullopt
  // for an id never given, or read already.
  std::optional<WarmProgress> Take(const std::string& request_id);

 private:
  struct Entry {
    tier::PrefetchHandle handle = 0;
    std::size_t ranks = 1;
    std::size_t prefix_chunks = 0;  // in L1 before the load
    WarmProgress progress;
  };
  struct State {
    Mutex mu;
    std::map<std::string, Entry> entries LMC_GUARDED_BY(mu);
    std::deque<std::string> unread LMC_GUARDED_BY(mu);  // finished, oldest first
    std::size_t pending LMC_GUARDED_BY(mu) = 0;
    std::uint64_t next_id LMC_GUARDED_BY(mu) = 0;
  };
  // The leading chunks of `keys` (chunk-major, `ranks` a chunk) resident on every rank.
  std::size_t ResidentPrefix(const std::vector<store::ObjectKey>& keys, std::size_t ranks) const;
  // Records a finished request (State::mu held); drops the oldest unread past the bound.
  static void FinishLocked(State& state, const std::string& id, Entry& entry)
      LMC_REQUIRES(state.mu);
  // The prefetch of `id` landed: its locks are released, its result kept.
  static void Landed(const std::weak_ptr<State>& weak, store::ObjectTable* table,
                     tier::Prefetcher* prefetcher, const std::string& id);

  const Deps deps_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace lmcache::server
