#include "fleet/fleet_link.h"

#include <chrono>
#include <set>

namespace lmcache::fleet {
namespace {

// How much the newest batch moves the throughput's average.
constexpr double kNewBatchWeight = 0.2;

}  // namespace

std::vector<ReadyPeer> FleetLink::Ready() const {
  Membership* membership = membership_.load(std::memory_order_acquire);
  if (membership == nullptr || channel_.load(std::memory_order_acquire) == nullptr ||
      closed_.load(std::memory_order_acquire)) {
    return {};
  }
  std::vector<ReadyPeer> ready = membership->Ready();
  MutexLock lock(&mu_);
  urls_.clear();  // a handle of a peer no longer ready is read from no more
  for (const ReadyPeer& peer : ready) urls_.emplace(peer.channel, peer.url);
  return ready;
}

void FleetLink::Call(PeerId peer, Op op, std::vector<std::string> payloads, TimeMs deadline_ms,
                     PeerRpc::Done done) const {
  Membership* membership = membership_.load(std::memory_order_acquire);
  if (membership == nullptr) {
    done(Status(ErrorCode::kUnavailable, "no peers yet"));
    return;
  }
  membership->rpc().Call(peer, op, std::move(payloads), deadline_ms, std::move(done));
}

void FleetLink::Read(PeerHandle peer, std::vector<UcxRead> reads, TimeMs deadline_ms,
                     UcxChannel::ReadsDone done) const {
  UcxChannel* channel = channel_.load(std::memory_order_acquire);
  if (channel == nullptr) {
    const std::size_t count = reads.size();
    done(Status(ErrorCode::kUnavailable, "no data channel yet"), std::vector<bool>(count, false));
    return;
  }
  std::string url;
  {
    MutexLock lock(&mu_);
    auto it = urls_.find(peer);
    if (it != urls_.end()) url = it->second;
  }
  std::vector<std::uint64_t> sizes;
  sizes.reserve(reads.size());
  for (const UcxRead& read : reads) sizes.push_back(read.size);
  channel->ReadEach(
      peer, std::move(reads), deadline_ms,
      [this, url = std::move(url), sizes = std::move(sizes),
       started = std::chrono::steady_clock::now(),
       done = std::move(done)](Status status, std::vector<bool> landed) {
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
        std::uint64_t bytes = 0;
        for (std::size_t i = 0; i < sizes.size() && i < landed.size(); ++i) {
          if (landed[i]) bytes += sizes[i];
        }
        if (!url.empty()) Record(url, bytes, took.count(), status.ok());
        done(std::move(status), std::move(landed));
      });
}

void FleetLink::Close() {
  closed_.store(true, std::memory_order_release);
  if (Membership* membership = membership_.load(std::memory_order_acquire)) {
    membership->StopCalls();
  }
  if (UcxChannel* channel = channel_.load(std::memory_order_acquire)) channel->EndReads();
}

void FleetLink::Record(const std::string& url, std::uint64_t bytes, double seconds,
                       bool ok) const {
  MutexLock lock(&mu_);
  Transfers& t = transfers_[url];
  t.batches += 1;
  t.bytes += bytes;  // what landed whole, even of a batch that failed
  if (!ok) {
    t.failures += 1;
    return;
  }
  if (seconds <= 0) return;
  const double gbps = static_cast<double>(bytes) / seconds / 1e9;
  // The first measured batch is the average; later ones move it.
  t.gbps = t.gbps == 0 ? gbps : (1 - kNewBatchWeight) * t.gbps + kNewBatchWeight * gbps;
}

void FleetLink::AddTransfers(std::vector<PeerView>* views) const {
  MutexLock lock(&mu_);
  std::set<std::string> present;
  for (PeerView& view : *views) {
    present.insert(view.url);
    auto it = transfers_.find(view.url);
    if (it == transfers_.end()) continue;
    view.loaded_bytes = it->second.bytes;
    view.load_batches = it->second.batches;
    view.load_failures = it->second.failures;
    view.load_gbps = it->second.gbps;
  }
  std::erase_if(transfers_, [&](const auto& entry) { return !present.contains(entry.first); });
}

}  // namespace lmcache::fleet
