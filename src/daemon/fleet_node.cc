#include "daemon/fleet_node.h"

#include <random>
#include <vector>

namespace lmcache::daemon {

std::unique_ptr<FleetNode> FleetNode::Create(const P2pFlags& config, const Clock& clock,
                                             store::L1Cache& cache) {
  std::unique_ptr<FleetNode> node(new FleetNode(config, clock, cache));
  node->link_ =
      std::make_unique<fleet::FleetLink>(&clock, config.lookup_timeout_ms, config.load_timeout_ms,
                                         config.keep_loaded, config.directed());
  // A new incarnation each start: a peer's cursor into an earlier life's
  // log is never taken for one into this.
  std::random_device random;
  const std::uint64_t incarnation = (std::uint64_t{random()} << 32) | random();
  node->chunk_log_ = std::make_unique<fleet::ChunkLog>(
      fleet::ChunkLogConfig{config.chunk_log_chunks}, incarnation);
  cache.table().AddListener(node->chunk_log_.get());
  node->SeedChunkLog();
  return node;
}

// What a warm restart adopted is resident already: counted, not logged (a
// peer meeting us lists it).
void FleetNode::SeedChunkLog() {
  constexpr std::size_t kPage = 65'536;
  const store::ObjectTable& table = cache_.table();
  std::vector<store::ListedObject> page = table.ListResident(nullptr, kPage, nullptr);
  while (!page.empty()) {
    std::vector<store::ObjectKey> keys;
    keys.reserve(page.size());
    for (const auto& object : page) keys.push_back(object.key);
    chunk_log_->Seed(keys);
    const store::ObjectKey last = page.back().key;
    page = table.ListResident(&last, kPage, nullptr);
  }
}

Result<fleet::UcxDescriptor> FleetNode::OpenChannel() {
  // UCX registers the whole pool once; peers learn the descriptor in the
  // handshake (server_info over the fleet endpoint).
  const shm::ShmSegment& segment = cache_.segment();
  LMC_ASSIGN_OR_RETURN(const std::string devices, DataChannelDevices(config_.listen_host));
  LMC_ASSIGN_OR_RETURN(
      channel_,
      fleet::UcxChannel::Create(segment.base(), segment.size(), &clock_, config_.key->data_key(),
                                {.verify_bytes = config_.verify_bytes, .net_devices = devices}));
  return channel_->Descriptor();
}

Status FleetNode::Start(server::Service& service, const std::string& self_url) {
  // A peer's read is served only for an object one of its lookup tasks
  // holds locked now.
  channel_->SetServeGuard([tasks = &service.state().peer_tasks()](
                              std::int64_t task, std::uint64_t offset, std::uint64_t size) {
    return tasks->Holds(task, offset, size);
  });
  LMC_RETURN_IF_ERROR(StartMembership(service, self_url));
  if (config_.directed()) StartDirectory();
  AddStatsSources(service);
  return Status::Ok();
}

Status FleetNode::StartMembership(server::Service& service, const std::string& self_url) {
  const fleet::MembershipConfig members{.sources = config_.peers,
                                        .self_url = self_url,
                                        .ours = service.OwnPeerInfo(),
                                        .call_timeout_ms = config_.call_timeout_ms,
                                        .probe_interval_ms = config_.probe_interval_ms,
                                        .etcd_ttl_ms = config_.etcd_ttl_ms,
                                        .etcd_user = config_.etcd_user,
                                        .etcd_password = config_.etcd_password,
                                        .max_peers = config_.max_peers};
  LMC_ASSIGN_OR_RETURN(membership_,
                       fleet::Membership::Create(members, *config_.key, channel_.get(), &clock_));
  service.SetP2pPeers([m = membership_.get(), link = link_.get()] {
    std::vector<fleet::PeerView> peers = m->Peers();
    link->AddTransfers(&peers);
    return peers;
  });
  service.SetP2pEtcd([m = membership_.get()] { return m->Etcd(); });
  link_->Bind(membership_.get(), channel_.get());
  membership_->Start();
  return Status::Ok();
}

// --p2p-lookup directed: each ready peer's chunk log read into the link's
// directory; with --p2p-last-copy-bias, eviction reads it too.
void FleetNode::StartDirectory() {
  fleet::DirectoryFeedConfig feed;
  feed.poll_interval_ms = config_.directory_poll_ms;
  feed.call_timeout_ms = config_.call_timeout_ms;
  feed_ = std::make_unique<fleet::DirectoryFeed>(feed, link_.get(), &link_->directory_to_feed());
  feed_->Start();
  if (config_.last_copy_bias > 0) {
    bias_ = std::make_unique<fleet::LastCopyBias>(&link_->directory_to_feed(),
                                                  chunk_log_->incarnation());
    cache_.evictor().SetBias(bias_.get(), config_.last_copy_bias);
    bias_set_ = true;
  }
}

void FleetNode::AddStatsSources(server::Service& service) {
  service.stats_sources().Add("p2p_links", [m = membership_.get(), channel = channel_.get()](
                                               server::StatsSnapshot* snapshot) {
    snapshot->p2p_peers = m->Stats();
    snapshot->p2p_rpc = m->rpc().Stats();
    snapshot->p2p_channel = channel->Stats();
    snapshot->p2p_etcd = m->EtcdTotals();
  });
  service.stats_sources().Add("p2p_directory",
                              [feed = feed_.get(), log = chunk_log_.get(),
                               link = link_.get()](server::StatsSnapshot* snapshot) {
                                if (feed != nullptr) snapshot->p2p_directory = feed->Stats();
                                const fleet::ChunkLogStats own = log->Stats();
                                snapshot->p2p_directory.log_last_seq = own.last_seq;
                                snapshot->p2p_directory.log_chunks = own.chunks;
                                snapshot->p2p_directory.log_dropped_records = own.dropped_records;
                                snapshot->p2p_lookups = link->LookupStats();
                              });
}

void FleetNode::StopFollowing() {
  if (feed_) feed_->Stop();  // before its calls are ended
  // The directory is no longer followed: eviction from here on (a drain, a
  // wait after a handover) is plain LRU.
  TakeBiasOff();
  // The prefetches in flight (some asking peers) end, their calls and reads
  // to peers ended now rather than at a hung peer's deadlines.
  link_->Close();
}

void FleetNode::StopPeers() {
  membership_.reset();  // stops meeting peers; its calls in flight end
  channel_.reset();     // peers' reads in flight fail; no peer reads the pool after this
}

// The evictor (the pool's, which may outlive the link) stops reading the
// directory; a pass using it is waited for. Once only: on the way out the
// pool may be gone by the time the node is destroyed.
void FleetNode::TakeBiasOff() {
  if (!bias_set_) return;
  cache_.evictor().SetBias(nullptr, 0);
  bias_set_ = false;
}

void FleetNode::Detach() {
  TakeBiasOff();
  if (channel_) channel_->SetServeGuard(nullptr);
  // The feed's thread stops, then every peer call in flight ends now, while
  // the feed its completions reach is still alive.
  if (feed_) feed_->Stop();
  if (membership_) membership_->StopCalls();
}

}  // namespace lmcache::daemon
