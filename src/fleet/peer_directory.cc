#include "fleet/peer_directory.h"

#include <algorithm>
#include <cstring>

#include "common/blake3.h"

namespace lmcache::fleet {

struct PeerDirectory::Peer {
  Peer(PeerId peer_id, std::uint64_t capacity)
      : id(peer_id), capacity_chunks(capacity), filter(capacity) {}
  const PeerId id;
  const std::uint64_t capacity_chunks;
  ChunkFilter filter;  // written under mu, read lock-free
  // Stale until its feed is in step: from its incarnation's first event,
  // or from a resync. A stale peer is named for every chunk.
  std::atomic<bool> stale{true};
  Mutex mu;                                          // one batch of this peer's events at a time
  std::uint64_t incarnation LMC_GUARDED_BY(mu) = 0;  // 0: none seen
  std::uint64_t next_seq LMC_GUARDED_BY(mu) = 1;
  // The incarnation, for KeptElsewhere's lock-free reads.
  std::atomic<std::uint64_t> life{0};

  void SetIncarnation(std::uint64_t value) LMC_REQUIRES(mu) {
    incarnation = value;
    life.store(value, std::memory_order_release);
  }
};

namespace {

// MurmurHash3's 64-bit finaliser: every input bit reaches every output bit.
std::uint64_t Fmix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// A holder's rank for a chunk: of the holders, the highest keeps it.
// `life_seed` is KeeperSeed of the holder's incarnation.
std::uint64_t KeeperSeed(std::uint64_t incarnation) { return Fmix64(incarnation); }
std::uint64_t KeeperRank(ChunkId chunk, std::uint64_t life_seed) {
  return Fmix64(chunk ^ life_seed);
}

}  // namespace

ChunkId PeerDirectory::ModelSeed(std::string_view model, std::string_view cache_salt) {
  // The model's own digest (and the tenant's, when there is one) is folded
  // into each chunk's id, so that two models' or tenants' equal token runs
  // differ.
  Blake3Hasher hasher;
  hasher.Update(model.data(), model.size());
  if (!cache_salt.empty()) {
    const char separator = '\0';  // a model name holds no NUL: "ab"+"c" != "a"+"bc"
    hasher.Update(&separator, 1);
    hasher.Update(cache_salt.data(), cache_salt.size());
  }
  const Blake3Digest digest = hasher.Finalize();
  ChunkId seed = 0;
  std::memcpy(&seed, digest.data(), sizeof(seed));
  return seed;
}

ChunkId PeerDirectory::ChunkIdOf(ChunkId model_seed, const store::ChunkHash& hash) {
  // A chunk hash is a digest (blake3 of tokens), but the filters take the
  // id's bits as uniform (bucket and fingerprint): a finaliser (MurmurHash3's
  // fmix64) keeps them so for any hash a client sends, at ~1 ns.
  ChunkId id = 0;
  std::memcpy(&id, hash.data(), sizeof(id));
  return Fmix64(id ^ model_seed);
}

ChunkId PeerDirectory::ChunkIdOf(std::string_view model, const store::ChunkHash& hash) {
  return ChunkIdOf(ModelSeed(model), hash);
}

std::shared_ptr<const PeerDirectory::Table> PeerDirectory::Snapshot() const {
  MutexLock lock(&mu_);
  return table_;
}

std::shared_ptr<PeerDirectory::Peer> PeerDirectory::Find(PeerId peer) const {
  const auto table = Snapshot();
  for (const auto& p : *table) {
    if (p->id == peer) return p;
  }
  return nullptr;
}

void PeerDirectory::AddPeer(PeerId peer, std::uint64_t capacity_chunks) {
  auto added = std::make_shared<Peer>(peer, capacity_chunks);  // allocated outside the lock
  MutexLock lock(&mu_);
  auto table = std::make_shared<Table>(*table_);
  std::erase_if(*table, [peer](const auto& p) { return p->id == peer; });
  table->push_back(std::move(added));
  table_ = std::move(table);
}

void PeerDirectory::ForgetPeer(PeerId peer) {
  std::shared_ptr<const Table> old;  // freed outside the lock (a large filter)
  MutexLock lock(&mu_);
  auto table = std::make_shared<Table>(*table_);
  std::erase_if(*table, [peer](const auto& p) { return p->id == peer; });
  old = std::exchange(table_, std::move(table));
}

void PeerDirectory::Resize(PeerId peer, std::uint64_t capacity_chunks) {
  auto resized = std::make_shared<Peer>(peer, capacity_chunks);
  if (const auto current = Find(peer)) {
    MutexLock peer_lock(&current->mu);
    MutexLock resized_lock(&resized->mu);
    resized->SetIncarnation(current->incarnation);
    resized->next_seq = current->next_seq;
  }
  MutexLock lock(&mu_);
  auto table = std::make_shared<Table>(*table_);
  for (auto& p : *table) {
    if (p->id == peer) p = resized;
  }
  table_ = std::move(table);
}

Applied PeerDirectory::Apply(PeerId peer, std::uint64_t incarnation, std::uint64_t seq,
                             DirectoryChange change, std::span<const ChunkId> chunks) {
  const auto p = Find(peer);
  if (!p) return Applied::kUnknownPeer;
  MutexLock lock(&p->mu);
  Applied applied = Applied::kApplied;
  if (p->incarnation != incarnation) {
    // A new process (or the first seen): what the old one held is gone; its
    // events count from 1.
    if (p->incarnation != 0) {
      counters_.incarnations.fetch_add(1, std::memory_order_relaxed);
      applied = Applied::kNewIncarnation;
    }
    p->filter.Clear();
    p->SetIncarnation(incarnation);
    p->next_seq = 1;
    p->stale.store(false, std::memory_order_release);
  }
  if (p->stale.load(std::memory_order_relaxed)) return Applied::kStale;
  if (seq != p->next_seq) {
    p->stale.store(true, std::memory_order_release);
    counters_.gaps.fetch_add(1, std::memory_order_relaxed);
    return Applied::kGap;
  }
  p->next_seq = seq + 1;
  counters_.applied_events.fetch_add(1, std::memory_order_relaxed);
  if (ChangeFilter(*p, change, chunks) > 0) {
    // Known incomplete from here: named for every chunk until resized.
    p->stale.store(true, std::memory_order_release);
    applied = Applied::kFull;
  }
  return applied;
}

std::size_t PeerDirectory::ChangeFilter(Peer& p, DirectoryChange change,
                                        std::span<const ChunkId> chunks) {
  std::size_t refused = 0;
  switch (change) {
    case DirectoryChange::kCleared: p.filter.Clear(); break;
    case DirectoryChange::kRemoved:
      for (const ChunkId chunk : chunks) p.filter.Erase(chunk);
      break;
    case DirectoryChange::kStored:
      for (const ChunkId chunk : chunks) {
        if (p.filter.Insert(chunk) == ChunkFilter::Inserted::kFull) refused += 1;
      }
      break;
  }
  counters_.full_inserts.fetch_add(refused, std::memory_order_relaxed);
  return refused;
}

void PeerDirectory::Empty(PeerId peer) {
  if (const auto p = Find(peer)) {
    MutexLock lock(&p->mu);
    p->stale.store(true, std::memory_order_release);
    p->filter.Clear();
  }
}

std::size_t PeerDirectory::Replay(PeerId peer, DirectoryChange change,
                                  std::span<const ChunkId> chunks) {
  const auto p = Find(peer);
  if (!p) return 0;
  MutexLock lock(&p->mu);
  return ChangeFilter(*p, change, chunks);
}

void PeerDirectory::Resynced(PeerId peer, std::uint64_t incarnation, std::uint64_t last_seq) {
  if (const auto p = Find(peer)) {
    MutexLock lock(&p->mu);
    p->SetIncarnation(incarnation);
    p->next_seq = last_seq + 1;
    p->stale.store(false, std::memory_order_release);
  }
}

std::vector<PeerId> PeerDirectory::MayHold(ChunkId chunk) const {
  const auto table = Snapshot();
  // Every peer's two buckets asked for at once: the loads overlap.
  for (const auto& p : *table) p->filter.Prefetch(chunk);
  std::vector<PeerId> holders;
  for (const auto& p : *table) {
    if (p->stale.load(std::memory_order_acquire) || p->filter.MayContain(chunk)) {
      holders.push_back(p->id);
    }
  }
  return holders;
}

std::vector<PeerPrefix> PeerDirectory::Prefixes(std::span<const ChunkId> chunks) const {
  const auto table = Snapshot();
  std::vector<PeerPrefix> out;
  std::vector<const Peer*> running;  // peers whose run goes on
  for (const auto& p : *table) {
    if (p->stale.load(std::memory_order_acquire)) {
      out.push_back({p->id, chunks.size(), true});
    } else {
      running.push_back(p.get());
    }
  }
  std::vector<PeerPrefix> fresh;
  // Chunk by chunk, the peers still running: their loads overlap, and a
  // peer leaves at its first miss (so a prompt costs what its runs are).
  for (std::size_t i = 0; i < chunks.size() && !running.empty(); ++i) {
    for (const Peer* p : running) p->filter.Prefetch(chunks[i]);
    std::erase_if(running, [&](const Peer* p) {
      if (p->filter.MayContain(chunks[i])) return false;
      if (i > 0) fresh.push_back({p->id, i, false});
      return true;
    });
  }
  for (const Peer* p : running) fresh.push_back({p->id, chunks.size(), false});
  std::stable_sort(fresh.begin(), fresh.end(),
                   [](const PeerPrefix& a, const PeerPrefix& b) { return a.chunks > b.chunks; });
  fresh.insert(fresh.end(), out.begin(), out.end());
  return fresh;
}

std::vector<PeerId> PeerDirectory::InStepPeers() const {
  const auto table = Snapshot();
  std::vector<PeerId> in_step;
  for (const auto& p : *table) {
    if (!p->stale.load(std::memory_order_acquire)) in_step.push_back(p->id);
  }
  return in_step;
}

std::vector<bool> PeerDirectory::KeptElsewhere(std::span<const ChunkId> chunks,
                                               std::uint64_t own_incarnation) const {
  const auto table = Snapshot();
  struct Holder {
    const Peer* peer;
    std::uint64_t seed;
  };
  std::vector<Holder> in_step;
  for (const auto& p : *table) {
    const std::uint64_t life = p->life.load(std::memory_order_acquire);
    if (!p->stale.load(std::memory_order_acquire) && life != 0) {
      in_step.push_back({p.get(), KeeperSeed(life)});
    }
  }
  const std::uint64_t own_seed = KeeperSeed(own_incarnation);
  std::vector<bool> kept(chunks.size(), false);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const std::uint64_t ours = KeeperRank(chunks[i], own_seed);
    // Only a peer that outranks us is probed: about half of them.
    for (const Holder& h : in_step) {
      if (KeeperRank(chunks[i], h.seed) > ours && h.peer->filter.MayContain(chunks[i])) {
        kept[i] = true;
        break;
      }
    }
  }
  return kept;
}

P2pDirectoryStats PeerDirectory::Stats() const {
  const auto table = Snapshot();
  P2pDirectoryStats s;
  s.peers = table->size();
  for (const auto& p : *table) {
    s.stale_peers += p->stale.load(std::memory_order_relaxed) ? 1 : 0;
    s.chunks += p->filter.size();
    s.memory_bytes += p->filter.memory_bytes();
  }
  counters_.CopyTo(&s);
  return s;
}

}  // namespace lmcache::fleet
