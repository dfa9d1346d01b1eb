// DirectoryFeed: keeps the PeerDirectory (peer_directory.h) in step with
// what each ready peer's L1 holds, by reading the peers' chunk logs
// (chunk_log.h) over the fleet endpoint (issue 43, section 1).
//
// Each ready peer goes through:
//   * listing: p2p_chunk_listing pages of its L1 into an emptied filter
//     (sized from the peer's own estimate of its capacity), starting at its
//     log position of the first page;
//   * catching up: p2p_chunk_events from that position, replayed (a chunk
//     stored and listed is held once; one removed after it was listed is
//     erased), until a page comes back short;
//   * following: p2p_chunk_events every poll interval (at once after a full
//     page), each record applied with its sequence checked.
// A gap (the peer's log dropped what we had not read: `lost`), a new
// incarnation (the peer restarted: a warm restart's adopted objects were
// never announced), a full filter (it is listed again into one twice the
// size) or an answer that cannot be decoded starts the listing again. Until
// a peer is following it is stale in the directory: asked for every chunk,
// as under broadcast, so a peer is never missed for being new; a listing
// begun again waits retry_ms, so a peer whose log cannot outlast a listing
// is not listed in a tight loop. A peer in step whose calls fail
// max_failures times in a row goes stale too (its filter may be missing what
// it stored meanwhile). A peer's filter is sized from its own estimate,
// bounded by max_capacity_chunks (a peer is untrusted). A peer that
// leaves the ready set (it left, is unreachable or excluded) is forgotten:
// its filter freed at once, listed again if it comes back. A call that
// fails is retried after `retry_ms`; a peer that does not serve the
// operations (an older build) stays stale.
//
// Thread-safety: Tick on the feed's thread (Start) or a test's; Stats from
// any thread. Completions run on the RPC thread and take `mu_`, never held
// across a call (a call after the RPC stopped completes on the caller's
// thread). After Stop returns nothing touches the directory.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/periodic_thread.h"
#include "fleet/chunk_feed_codec.h"
#include "fleet/fleet_link.h"
#include "fleet/fleet_stats.h"
#include "fleet/peer_directory.h"

namespace lmcache::fleet {

struct DirectoryFeedConfig {
  TimeMs poll_interval_ms = 100;  // a peer in step is asked again this often
  TimeMs retry_ms = 2'000;        // after a failed call
  TimeMs call_timeout_ms = 3'000;
  std::size_t page_records = 1024;
  std::size_t listing_chunks = 65'536;
  std::uint64_t min_capacity_chunks = 16'384;
  // A peer's filter grows no further (2.5 bytes a chunk: 40 MiB): a peer
  // that holds more stays stale (asked for everything), listed again
  // every retry only.
  std::uint64_t max_capacity_chunks = 1u << 24;
  // Calls to a peer in step that fail in a row before its filter is no
  // longer trusted (stale until listed again).
  int max_failures = 3;
};

// The feed's part of P2pDirectoryStats: its own counters, and its part of
// the gaps and new lives (the directory counts the rest).
LMC_STATS_COUNTED(DirectoryFeedCounters, P2pDirectoryStats, LMC_P2P_DIRECTORY_STATS);

class DirectoryFeed {
 public:
  // `peers`, `directory` and the peers' clock must outlive the feed.
  DirectoryFeed(DirectoryFeedConfig config, const PeerAccess* peers, PeerDirectory* directory);
  ~DirectoryFeed();  // stops

  void Start();
  // Joins the thread; completions that come later change nothing.
  void Stop() LMC_EXCLUDES(mu_);
  // One pass: adds the ready peers not yet known, forgets those no longer
  // ready, and sends each idle peer's next call that is due.
  void Tick() LMC_EXCLUDES(mu_);

  // The feed's counters (the directory's own figures are filled in too).
  P2pDirectoryStats Stats() const LMC_EXCLUDES(mu_);

 private:
  enum class Phase : std::uint8_t { kListing, kCatchingUp, kFollowing };
  struct PeerFeed {
    std::uint64_t generation = 0;  // a completion of another generation is ignored
    Phase phase = Phase::kListing;
    bool in_flight = false;
    TimeMs next_ms = 0;
    std::uint64_t incarnation = 0;
    std::uint64_t cursor = 0;
    bool listing_started = false;
    std::string listing_next;
    std::uint64_t capacity = 0;  // of its filter now
    bool grow = false;           // its filter filled: the next listing doubles it
    int failures = 0;            // calls failed in a row
  };
  // What a handled reply asks for next.
  enum class Next : std::uint8_t {
    kAgain,  // the next call at once (a listing's next page, a full page's successor)
    kPoll,   // the next poll, one interval on
    kLater,  // after retry_ms (listed again: not in a tight loop)
  };
  struct Request {
    PeerId peer = 0;
    std::uint64_t generation = 0;
    Op op = Op::kP2pChunkEvents;
    std::vector<std::string> payloads;
  };

  // The call `feed` makes next (marks it in flight).
  Request NextCall(PeerId peer, PeerFeed& feed) LMC_REQUIRES(mu_);
  void Send(Request request) LMC_EXCLUDES(mu_);
  void OnReply(const Request& request, Result<std::string> reply) LMC_EXCLUDES(mu_);
  Next OnListing(PeerId peer, PeerFeed& feed, const ChunkListing& listing) LMC_REQUIRES(mu_);
  Next OnPage(PeerId peer, PeerFeed& feed, const ChunkPage& page) LMC_REQUIRES(mu_);
  // The peer is stale (asked for everything) until listed again.
  Next Relist(PeerId peer, PeerFeed& feed) LMC_REQUIRES(mu_);

  const DirectoryFeedConfig config_;
  const PeerAccess* const peers_;
  PeerDirectory* const directory_;
  mutable Mutex mu_;
  bool stopped_ LMC_GUARDED_BY(mu_) = false;
  std::map<PeerId, PeerFeed> feeds_ LMC_GUARDED_BY(mu_);
  std::uint64_t next_generation_ LMC_GUARDED_BY(mu_) = 1;
  DirectoryFeedCounters counts_;  // the feed's own counters
  std::unique_ptr<PeriodicThread> thread_;
};

}  // namespace lmcache::fleet
