// FleetLink: how the p2p L2 adapter (tier/p2p) reaches the fleet: the
// membership (which peers are ready, and the calls to them), the data
// channel, and the requester's deadlines.
//
// Why a link and not the pointers themselves: the L2 tier is built before
// the service, and the membership after it (its handshake carries the
// service's boot id), so the adapter is handed the link at creation and the
// server binds it once the membership stands, before any request is served.
// Until then the adapter has no peers (every lookup misses). The server
// stops the L2 tier before the membership and the channel go, so nothing
// reads a bound pointer after its object died.
//
// Thread-safety: Bind once from the starting thread; the getters from any
// thread (release/acquire).
#pragma once

#include <atomic>

#include "common/clock.h"

namespace lmcache::fleet {

class Membership;
class UcxChannel;

class FleetLink {
 public:
  // `clock` must outlive the link.
  FleetLink(const Clock* clock, TimeMs lookup_timeout_ms, TimeMs load_timeout_ms)
      : clock_(clock), lookup_timeout_ms_(lookup_timeout_ms), load_timeout_ms_(load_timeout_ms) {}

  // Both must outlive every use through the link (see above).
  void Bind(Membership* membership, UcxChannel* channel) {
    channel_.store(channel, std::memory_order_release);
    membership_.store(membership, std::memory_order_release);
  }
  // Null until bound.
  Membership* membership() const { return membership_.load(std::memory_order_acquire); }
  UcxChannel* channel() const { return channel_.load(std::memory_order_acquire); }
  const Clock& clock() const { return *clock_; }
  // A lookup's calls (p2p_lookup_and_lock, then p2p_query_lookup_results
  // until answered) end by this long after it started
  // (--p2p-lookup-timeout).
  TimeMs lookup_timeout_ms() const { return lookup_timeout_ms_; }
  // One batch of reads from one peer ends by this long after it was sent
  // (--p2p-load-timeout).
  TimeMs load_timeout_ms() const { return load_timeout_ms_; }

 private:
  const Clock* const clock_;
  const TimeMs lookup_timeout_ms_;
  const TimeMs load_timeout_ms_;
  std::atomic<Membership*> membership_{nullptr};
  std::atomic<UcxChannel*> channel_{nullptr};
};

}  // namespace lmcache::fleet
