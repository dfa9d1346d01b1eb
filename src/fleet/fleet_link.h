// PeerAccess: what a requester needs from the fleet (the ready peers, calls
// to them, reads from them, and its deadlines), and FleetLink, the server's
// one, over the membership, its peer RPC and the UCX data channel. The p2p
// L2 adapter (tier/p2p) sees only PeerAccess, so its tests drive it with a
// fake fleet whose answers and reads they hold back and release.
//
// Why a link and not the pointers themselves: the L2 tier is built before
// the service, and the membership after it (its handshake carries the
// service's boot id), so the adapter is handed the link at creation and the
// server binds it once the membership stands, before any request is served.
// Until then there are no peers (every lookup misses). The server stops the
// L2 tier before the membership and the channel go, so nothing reaches
// them through the link after they died.
//
// FleetLink also keeps, per peer, what was loaded from it (bytes, batches,
// failures, recent throughput) for /status: the adapter's figures are the
// fleet's totals.
//
// Thread-safety: every PeerAccess method and AddTransfers from any thread;
// FleetLink::Bind once, from the starting thread (release/acquire).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "fleet/fleet_stats.h"
#include "fleet/membership.h"
#include "fleet/peer_directory.h"
#include "fleet/peer_rpc.h"
#include "fleet/ucx_channel.h"

namespace lmcache::fleet {

class PeerAccess {
 public:
  virtual ~PeerAccess() = default;
  // The peers to ask now, in the membership's order.
  virtual std::vector<ReadyPeer> Ready() const = 0;
  // PeerRpc::Call: `done` runs exactly once, by `deadline_ms` at the latest.
  virtual void Call(PeerId peer, Op op, std::vector<std::string> payloads, TimeMs deadline_ms,
                    PeerRpc::Done done) const = 0;
  // UcxChannel::ReadEach: `done` runs exactly once, with the batch's status
  // and, per read, whether all of it arrived; no byte lands after it.
  virtual void Read(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
                    UcxChannel::ReadsDone done) const = 0;
  virtual const Clock& clock() const = 0;
  // A lookup's calls end by this long after it started (--p2p-lookup-timeout).
  virtual TimeMs lookup_timeout_ms() const = 0;
  // One batch of reads from one peer ends by this long after it was sent
  // (--p2p-load-timeout).
  virtual TimeMs load_timeout_ms() const = 0;
  // Whether a chunk loaded from a peer stays in L1 as our own, or is served
  // once (--p2p-keep-loaded).
  virtual bool keep_loaded() const { return true; }
  // Which peers may hold which chunks, when lookups ask only the peers it
  // names (--p2p-lookup directed); null: every ready peer is asked.
  virtual const PeerDirectory* directory() const { return nullptr; }
  // What lookups asked and found; null: not counted.
  virtual P2pLookupCounters* lookup_counters() const { return nullptr; }
};

class FleetLink final : public PeerAccess {
 public:
  // `clock` must outlive the link.
  // `directed`: lookups consult the directory (which the server's
  // DirectoryFeed keeps in step).
  FleetLink(const Clock* clock, TimeMs lookup_timeout_ms, TimeMs load_timeout_ms,
            bool keep_loaded = true, bool directed = false)
      : clock_(clock),
        lookup_timeout_ms_(lookup_timeout_ms),
        load_timeout_ms_(load_timeout_ms),
        keep_loaded_(keep_loaded),
        directed_(directed) {}

  // Both must outlive every use through the link (see above).
  void Bind(Membership* membership, UcxChannel* channel) {
    channel_.store(channel, std::memory_order_release);
    membership_.store(membership, std::memory_order_release);
  }

  std::vector<ReadyPeer> Ready() const override LMC_EXCLUDES(mu_);
  void Call(PeerId peer, Op op, std::vector<std::string> payloads, TimeMs deadline_ms,
            PeerRpc::Done done) const override;
  // Reads, and counts what it loaded from that peer (AddTransfers).
  void Read(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
            UcxChannel::ReadsDone done) const override LMC_EXCLUDES(mu_);
  const Clock& clock() const override { return *clock_; }
  TimeMs lookup_timeout_ms() const override { return lookup_timeout_ms_; }
  TimeMs load_timeout_ms() const override { return load_timeout_ms_; }
  bool keep_loaded() const override { return keep_loaded_; }
  const PeerDirectory* directory() const override { return directed_ ? &directory_ : nullptr; }
  P2pLookupCounters* lookup_counters() const override { return &lookups_; }

  bool directed() const { return directed_; }
  // The directory, for the feed that fills it.
  PeerDirectory& directory_to_feed() { return directory_; }
  P2pLookupStats LookupStats() const {
    P2pLookupStats s;
    lookups_.CopyTo(&s);
    return s;
  }

  // At shutdown, before the L2 tier stops: no peer is ready any more, and
  // every call and read in flight or to come ends now (a read whose bytes
  // are landing is waited for), so the tier's stop does not wait out a hung
  // peer's deadlines. Bound first.
  void Close();

  // Fills in each view's figures of what was loaded from it (by URL), and
  // forgets the figures of peers no longer among `views`.
  void AddTransfers(std::vector<PeerView>* views) const LMC_EXCLUDES(mu_);

 private:
  struct Transfers {
    std::uint64_t bytes = 0;
    std::uint64_t batches = 0;
    std::uint64_t failures = 0;
    double gbps = 0;  // moving average of the batches' throughput
  };
  // One batch from the peer at `url` ended.
  void Record(const std::string& url, std::uint64_t bytes, double seconds, bool ok) const
      LMC_EXCLUDES(mu_);

  const Clock* const clock_;
  const TimeMs lookup_timeout_ms_;
  const TimeMs load_timeout_ms_;
  const bool keep_loaded_;
  const bool directed_;
  PeerDirectory directory_;
  mutable P2pLookupCounters lookups_;
  std::atomic<Membership*> membership_{nullptr};
  std::atomic<UcxChannel*> channel_{nullptr};
  std::atomic<bool> closed_{false};
  // Taken on the requester's threads and the channel's completions; never
  // with the membership's lock (which is held across the channel's Connect).
  mutable Mutex mu_;
  mutable std::map<PeerHandle, std::string> urls_ LMC_GUARDED_BY(mu_);  // of the ready peers
  mutable std::map<std::string, Transfers> transfers_ LMC_GUARDED_BY(mu_);  // by URL
};

}  // namespace lmcache::fleet
