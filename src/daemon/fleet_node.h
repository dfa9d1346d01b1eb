// FleetNode: this server's part in a fleet (P2P on), in one place: the UCX
// data channel, the membership, the fleet link the p2p L2 adapter reads
// through, the directory feed, the chunk log and the last-copy bias; the
// order they start and stop in; and their stats sources.
//
// main.cc keeps the phases of a server's life and calls in at each:
//   Create        before the L2 tier: the link (the tier's p2p adapter
//                 reads through it) and the chunk log, listening to the
//                 table before anything is stored, seeded with what is
//                 resident already (a warm restart's objects).
//   OpenChannel   before the service: UCX registers the pool; the
//                 descriptor goes into the service's configuration (peers
//                 learn it in the handshake).
//   Start         with the service: the channel's serve guard, the
//                 membership, the link bound, the feed and the bias; their
//                 stats registered with the service.
//   StopFollowing once requests stopped, before the L2 tier stops: the feed,
//                 the bias, the link (its prefetches and calls in flight end).
//   StopPeers     after the L2 tier stopped: the membership (no more peer
//                 calls), then the channel (no peer reads the pool after it).
//   Detach        first on every way out, a failed start's included (the
//                 server calls it before its service goes): the evictor's
//                 bias (unless StopFollowing took it off: the pool may be
//                 gone by then) and the channel's serve guard (it reads the
//                 service's lookup tasks) taken off, the feed stopped, the
//                 peer calls in flight ended. Idempotent.
//
// Thread-safety: every call from main's thread, in the order above; the
// parts run threads of their own (each documents its contract).
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "daemon/p2p_config.h"
#include "fleet/chunk_log.h"
#include "fleet/directory_feed.h"
#include "fleet/fleet_link.h"
#include "fleet/last_copy_bias.h"
#include "fleet/membership.h"
#include "fleet/ucx_channel.h"
#include "lmcache/status.h"
#include "server/service.h"
#include "store/l1_cache.h"

namespace lmcache::daemon {

class FleetNode {
 public:
  static std::unique_ptr<FleetNode> Create(const P2pFlags& config, const Clock& clock,
                                           store::L1Cache& cache);
  ~FleetNode() { Detach(); }
  FleetNode(const FleetNode&) = delete;
  FleetNode& operator=(const FleetNode&) = delete;

  fleet::FleetLink* link() { return link_.get(); }
  fleet::ChunkLog* chunk_log() { return chunk_log_.get(); }

  // The data channel's descriptor, for ServiceConfig::p2p_data_channel.
  Result<fleet::UcxDescriptor> OpenChannel();
  // `self_url`: this server's fleet URL as peers name it (tcp://advertised).
  Status Start(server::Service& service, const std::string& self_url);
  void StopFollowing();
  void StopPeers();
  void Detach();

 private:
  FleetNode(const P2pFlags& config, const Clock& clock, store::L1Cache& cache)
      : config_(config), clock_(clock), cache_(cache) {}
  void SeedChunkLog();
  Status StartMembership(server::Service& service, const std::string& self_url);
  void StartDirectory();
  void AddStatsSources(server::Service& service);
  void TakeBiasOff();

  const P2pFlags& config_;
  const Clock& clock_;
  store::L1Cache& cache_;
  // Destroyed in reverse order of declaration: the bias (it reads the
  // link's directory) first; the link, bound to the membership and the
  // channel, before them; the membership, which holds endpoints of the
  // channel, before the channel, which registered the pool.
  std::unique_ptr<fleet::UcxChannel> channel_;
  std::unique_ptr<fleet::Membership> membership_;
  std::unique_ptr<fleet::FleetLink> link_;
  std::unique_ptr<fleet::DirectoryFeed> feed_;
  std::unique_ptr<fleet::ChunkLog> chunk_log_;
  std::unique_ptr<fleet::LastCopyBias> bias_;
  bool bias_set_ = false;  // the evictor reads bias_ (StartDirectory to TakeBiasOff)
};

}  // namespace lmcache::daemon
