#include "fleet/directory_feed.h"

#include <algorithm>
#include <set>

#include "common/msgpack_codec.h"

namespace lmcache::fleet {

LMC_STATS_ROWS(P2pDirectoryStatRows, P2pDirectoryStats, LMC_P2P_DIRECTORY_STATS)
LMC_STATS_ROWS(P2pLookupStatRows, P2pLookupStats, LMC_P2P_LOOKUP_STATS)

namespace {

std::string EncodeUint(std::uint64_t value) {
  msgpk::Encoder e;
  e.Uint(value);
  return e.Take();
}

std::string EncodeBin(std::string_view value) {
  msgpk::Encoder e;
  e.Bin(value);
  return e.Take();
}

}  // namespace

DirectoryFeed::DirectoryFeed(DirectoryFeedConfig config, const PeerAccess* peers,
                             PeerDirectory* directory)
    : config_(config), peers_(peers), directory_(directory) {}

DirectoryFeed::~DirectoryFeed() { Stop(); }

void DirectoryFeed::Start() {
  // Ticks at a fraction of the poll interval, so a peer's poll is late by
  // at most that fraction.
  const auto period = std::chrono::milliseconds(std::max<TimeMs>(10, config_.poll_interval_ms / 4));
  thread_ = std::make_unique<PeriodicThread>("p2p-directory", period, [this] { Tick(); });
  thread_->Start();
}

void DirectoryFeed::Stop() {
  if (thread_) thread_->Stop();
  MutexLock lock(&mu_);
  stopped_ = true;
}

void DirectoryFeed::Tick() {
  const std::vector<ReadyPeer> ready = peers_->Ready();
  std::vector<Request> due;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    std::set<PeerId> ready_ids;
    for (const ReadyPeer& peer : ready) ready_ids.insert(peer.rpc);
    for (auto it = feeds_.begin(); it != feeds_.end();) {
      if (ready_ids.contains(it->first)) {
        ++it;
        continue;
      }
      directory_->ForgetPeer(it->first);
      counts_.forgotten_peers += 1;
      it = feeds_.erase(it);
    }
    for (const PeerId id : ready_ids) {
      if (feeds_.contains(id)) continue;
      PeerFeed& feed = feeds_[id];
      feed.generation = next_generation_++;
      feed.capacity = config_.min_capacity_chunks;
      directory_->AddPeer(id, feed.capacity);  // stale until its listing is in
      counts_.resyncs += 1;
    }
    const TimeMs now = peers_->clock().NowMs();
    for (auto& [id, feed] : feeds_) {
      if (!feed.in_flight && now >= feed.next_ms) due.push_back(NextCall(id, feed));
    }
  }
  for (Request& request : due) Send(std::move(request));
}

DirectoryFeed::Request DirectoryFeed::NextCall(PeerId peer, PeerFeed& feed) {
  feed.in_flight = true;
  Request request{peer, feed.generation, Op::kP2pChunkEvents, {}};
  if (feed.phase == Phase::kListing) {
    request.op = Op::kP2pChunkListing;
    request.payloads = {EncodeBin(feed.listing_next), EncodeUint(config_.listing_chunks)};
  } else {
    request.payloads = {EncodeUint(feed.cursor), EncodeUint(config_.page_records)};
  }
  counts_.polls += 1;
  return request;
}

void DirectoryFeed::Send(Request request) {
  const TimeMs deadline = peers_->clock().NowMs() + config_.call_timeout_ms;
  std::vector<std::string> payloads = std::move(request.payloads);
  request.payloads.clear();
  peers_->Call(request.peer, request.op, std::move(payloads), deadline,
               [this, request](Result<std::string> reply) { OnReply(request, std::move(reply)); });
}

void DirectoryFeed::OnReply(const Request& request, Result<std::string> reply) {
  std::optional<Request> next;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    auto it = feeds_.find(request.peer);
    if (it == feeds_.end() || it->second.generation != request.generation) return;
    PeerFeed& feed = it->second;
    feed.in_flight = false;
    const TimeMs now = peers_->clock().NowMs();
    std::optional<Next> handled;
    if (reply.ok()) {
      counts_.feed_bytes += reply->size();
      if (request.op == Op::kP2pChunkListing) {
        if (auto listing = DecodeChunkListing(*reply); listing.ok()) {
          handled = OnListing(request.peer, feed, *listing);
        }
      } else if (auto page = DecodeChunkPage(*reply); page.ok()) {
        handled = OnPage(request.peer, feed, *page);
      }
    }
    if (!handled) {
      // Malformed: nothing of it is trusted, and the peer is listed again.
      // Unanswered or refused: asked again later, where it was; after
      // max_failures in a row its filter is no longer trusted either.
      counts_.poll_failures += 1;
      feed.failures += 1;
      if (reply.ok() || (feed.phase != Phase::kListing && feed.failures >= config_.max_failures)) {
        Relist(request.peer, feed);
      }
      handled = Next::kLater;
    } else {
      feed.failures = 0;
    }
    switch (*handled) {
      case Next::kAgain: next = NextCall(request.peer, feed); break;
      case Next::kPoll: feed.next_ms = now + config_.poll_interval_ms; break;
      case Next::kLater: feed.next_ms = now + config_.retry_ms; break;
    }
  }
  if (next) Send(std::move(*next));
}

DirectoryFeed::Next DirectoryFeed::OnListing(PeerId peer, PeerFeed& feed,
                                             const ChunkListing& listing) {
  if (!feed.listing_started) {
    // The listing's first page: the peer's life, and the log position the
    // rest of it and the catching up go on from.
    feed.incarnation = listing.incarnation;
    feed.cursor = listing.log_cursor;
    const std::uint64_t wanted = std::max(
        {config_.min_capacity_chunks, listing.capacity_chunks, feed.grow ? 2 * feed.capacity : 0});
    feed.capacity = std::min(wanted, config_.max_capacity_chunks);
    feed.grow = false;
    directory_->AddPeer(peer, feed.capacity);  // a fresh, empty, stale filter
    feed.listing_started = true;
  } else if (listing.incarnation != feed.incarnation) {  // it restarted meanwhile
    counts_.incarnations += 1;
    return Relist(peer, feed);
  }
  counts_.listed_chunks += listing.chunks.size();
  if (directory_->Replay(peer, DirectoryChange::kStored, listing.chunks) > 0) {
    feed.grow = true;  // the peer's estimate of its capacity was short
    return Relist(peer, feed);
  }
  if (listing.next.empty()) {
    feed.phase = Phase::kCatchingUp;
  } else {
    feed.listing_next = listing.next;
  }
  return Next::kAgain;
}

DirectoryFeed::Next DirectoryFeed::OnPage(PeerId peer, PeerFeed& feed, const ChunkPage& page) {
  if (page.incarnation != feed.incarnation || page.lost) {
    // Restarted (a warm restart's adopted objects were never announced), or
    // its log dropped what we had not read.
    if (page.incarnation != feed.incarnation) counts_.incarnations += 1;
    if (page.lost) counts_.gaps += 1;
    return Relist(peer, feed);
  }
  const bool full_page = page.records.size() >= config_.page_records;
  if (feed.phase == Phase::kCatchingUp) {
    for (const ChunkRecord& record : page.records) {
      if (directory_->Replay(peer, record.change, record.chunks) > 0) {
        feed.grow = true;
        return Relist(peer, feed);
      }
    }
    feed.cursor = page.next_cursor;
    if (full_page) return Next::kAgain;
    directory_->Resynced(peer, feed.incarnation, feed.cursor);
    feed.phase = Phase::kFollowing;
    return Next::kPoll;
  }
  for (const ChunkRecord& record : page.records) {
    const Applied applied =
        directory_->Apply(peer, feed.incarnation, record.seq, record.change, record.chunks);
    if (applied == Applied::kGap || applied == Applied::kStale || applied == Applied::kFull) {
      feed.grow = applied == Applied::kFull;
      return Relist(peer, feed);
    }
  }
  feed.cursor = page.next_cursor;
  return full_page ? Next::kAgain : Next::kPoll;
}

DirectoryFeed::Next DirectoryFeed::Relist(PeerId peer, PeerFeed& feed) {
  directory_->Empty(peer);  // stale (asked for everything) until listed again
  feed.phase = Phase::kListing;
  feed.listing_started = false;
  feed.listing_next.clear();
  counts_.resyncs += 1;
  return Next::kLater;
}

P2pDirectoryStats DirectoryFeed::Stats() const {
  P2pDirectoryStats s = directory_->Stats();
  counts_.AddTo(&s);
  return s;
}

}  // namespace lmcache::fleet
