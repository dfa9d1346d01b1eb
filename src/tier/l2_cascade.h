// L2Cascade: the L2 adapters in cascade order, as a list that changes while
// stores and prefetches run (POST and DELETE /config/adapters, issue 44).
//
// Readers take a View: an immutable snapshot of the list, cheap to take (one
// shared_ptr copied under a leaf mutex), which a store batch or a prefetch
// request keeps from its first adapter call to its last, so that one request
// sees one cascade throughout (its lookup's locks are released where they
// were taken; its plan's sources stay valid). A change publishes a new list;
// Views taken before it keep the old one.
//
// An adapter taken out of the list drains: it serves the Views that still
// hold it (the batches and prefetches in flight finish on it), and once the
// last of them is dropped it is destroyed, on the thread of Remove (which
// waits for that up to a timeout) or of a later Reap, never on a worker or
// an adapter's completion thread, where an adapter's destructor (joining its
// own threads, closing its ring) must not run. An adapter may be handed a
// farewell that runs just before a removed adapter is destroyed (the KV
// events announce what it held as removed); the cascade's own end runs none.
//
// Names: each member has a unique name, given ("name" in its JSON) or
// made as <type>#<n>, n counting every adapter this cascade was given from
// 1, so a server's first adapters are fs#1, resp#2, ... as before, and a
// name never moves to another adapter.
//
// Thread-safety: every method from any thread. Insert and Remove change
// the list one at a time; Views stay valid whatever happens to the list.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "lmcache/status.h"
#include "tier/l2_adapter.h"

namespace lmcache::tier {

struct L2CascadeMember {
  std::string name;
  std::string config;       // its JSON as given, secrets masked (GET /config/adapters)
  std::string description;  // what it stores to ("fs:/data/l2"): the KV events' location
  L2Adapter* adapter = nullptr;
};

class L2Cascade {
  struct Entry;
  struct Drains;
  using List = std::vector<std::shared_ptr<const Entry>>;

 public:
  // The list at one moment; holding it keeps each of its adapters alive.
  class View {
   public:
    View() = default;
    std::size_t size() const { return list_ ? list_->size() : 0; }
    bool empty() const { return size() == 0; }
    L2Adapter& adapter(std::size_t i) const;
    const L2CascadeMember& member(std::size_t i) const;
    std::vector<L2Adapter*> adapters() const;
    // The position of the member named `name`, if any.
    std::optional<std::size_t> Find(std::string_view name) const;

   private:
    friend class L2Cascade;
    explicit View(std::shared_ptr<const List> list) : list_(std::move(list)) {}
    std::shared_ptr<const List> list_;
  };

  struct Addition {
    std::string name;                          // empty: <type>#<n>
    std::string config;                        // shown as given (masked by the caller)
    std::string exclusive;  // L2AdapterSpec::exclusive: refused while another adapter holds it
    std::optional<std::size_t> position;       // 0-based; nullopt: the end
    std::function<void(L2Adapter&)> farewell;  // once removed, before it is destroyed; may be null
  };
  enum class Drained : std::uint8_t { kDrained, kDraining };
  struct Removal {
    std::string name;
    std::string description;
    Drained drained = Drained::kDraining;
  };

  L2Cascade();
  // Destroys every adapter it owns: no View may be held any more.
  ~L2Cascade();
  L2Cascade(const L2Cascade&) = delete;
  L2Cascade& operator=(const L2Cascade&) = delete;

  // A cascade of adapters owned elsewhere (the controllers' tests), in order.
  static std::unique_ptr<L2Cascade> Borrowing(const std::vector<L2Adapter*>& adapters);

  View Current() const LMC_EXCLUDES(mu_);
  // True while some adapter of the current list takes stores: the store
  // controller queues nothing otherwise (one atomic load on the request path).
  bool TakesStores() const { return takes_stores_.load(std::memory_order_acquire); }

  // Adds `adapter` (owned from now on); the name it got. Refused when the
  // name is taken (by a member, or one still draining) or malformed, its
  // `exclusive` is held, or the position is past the end.
  Result<std::string> Insert(std::unique_ptr<L2Adapter> adapter, Addition addition)
      LMC_EXCLUDES(mu_);
  // The same for an adapter that outlives the cascade (not destroyed).
  Result<std::string> InsertBorrowed(L2Adapter* adapter, Addition addition) LMC_EXCLUDES(mu_);
  // Takes the member named `name` out of the list at once, then waits up to
  // `drain_timeout` for the Views holding it to end and destroys it (kDrained);
  // past the timeout it is left draining (kDraining) and a later Reap (or
  // the cascade's end) destroys it. kNotFound when no member has the name.
  Result<Removal> Remove(std::string_view name, std::chrono::milliseconds drain_timeout)
      LMC_EXCLUDES(mu_);
  // Destroys the removed adapters that have drained since; how many still drain.
  std::size_t Reap() LMC_EXCLUDES(mu_);
  // Names of the removed adapters still draining (not those that drained
  // and wait for a Reap).
  std::vector<std::string> Draining() const LMC_EXCLUDES(mu_);
  // The name of the member (or draining adapter) holding `exclusive`, if any.
  std::optional<std::string> Holder(std::string_view exclusive) const LMC_EXCLUDES(mu_);

 private:
  Result<std::string> Add(L2Adapter* adapter, std::unique_ptr<L2Adapter> owned, Addition addition)
      LMC_EXCLUDES(mu_);
  void PublishLocked(std::shared_ptr<const List> list) LMC_REQUIRES(mu_);
  bool NameTakenLocked(std::string_view name) const LMC_REQUIRES(mu_);
  std::optional<std::string> HolderLocked(std::string_view exclusive) const LMC_REQUIRES(mu_);
  // What the cascade keeps of each member beyond its entry: the adapter
  // when it owns it, and its farewell.
  struct Kept;
  // Runs `kept`'s farewell (for a removed member) and destroys its
  // adapter; with no lock held.
  static void Destroy(std::unique_ptr<Kept> kept, bool farewell);

  // Told by each entry's destructor (any thread) that its adapter drained.
  const std::shared_ptr<Drains> drains_;

  mutable Mutex mu_;  // a leaf
  std::shared_ptr<const List> list_ LMC_GUARDED_BY(mu_);
  std::uint64_t next_number_ LMC_GUARDED_BY(mu_) = 1;
  // Every member of the current list, by entry number.
  std::map<std::uint64_t, std::unique_ptr<Kept>> members_ LMC_GUARDED_BY(mu_);
  // Removed members still draining (a View holds them), by entry number.
  std::map<std::uint64_t, std::unique_ptr<Kept>> draining_ LMC_GUARDED_BY(mu_);
  std::atomic<bool> takes_stores_{false};
};

}  // namespace lmcache::tier
