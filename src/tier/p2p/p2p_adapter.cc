#include "tier/p2p/p2p_adapter.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>

#include "common/msgpack_codec.h"
#include "fleet/chunk_log.h"
#include "fleet/p2p_object_key.h"
#include "protocol/p2p_codec.h"
#include "protocol/wire_codec.h"

namespace lmcache::tier {

// What the adapter's completions count, alive while any call of ours may
// still complete (an unlock's answer may come after the adapter is gone).
struct P2pAdapter::Shared {
  L2Counters counters;
};

namespace {

// A peer answering nil is asked this often at most. Our owners answer a
// lookup at once, so nil from them means the task is unknown (reaped,
// displaced); an owner that works asynchronously gets a few more tries
// before the deadline ends them anyway.
constexpr int kMaxQueries = 64;

std::string EncodeInt(std::int64_t value) {
  msgpk::Encoder e;
  e.Int(value);
  return e.Take();
}

// The layouts a lookup sends: per object group of `keys`, one uint8 tensor
// of the object's size (our owners compare sizes; see the header).
std::string LayoutsFrame(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes) {
  protocol::P2pLayouts layouts;
  for (const store::ObjectKey& key : keys) {
    layouts.by_group.try_emplace(
        key.object_group_id,
        protocol::P2pLayout{{{static_cast<std::int64_t>(object_bytes)}}, {"uint8"}});
  }
  return protocol::EncodeP2pLayouts(layouts);
}

std::string KeysFrame(std::span<const store::ObjectKey> keys) {
  std::vector<protocol::P2pObjectKey> wire;
  wire.reserve(keys.size());
  for (const store::ObjectKey& key : keys) wire.push_back(fleet::ToP2pObjectKey(key));
  return protocol::EncodeP2pKeys(wire);
}

}  // namespace

// One lookup across the ready peers, shared by its calls' completions.
struct P2pAdapter::Lookup {
  P2pAdapter* adapter = nullptr;
  const fleet::PeerAccess* rpc = nullptr;
  const Clock* clock = nullptr;
  std::vector<store::ObjectKey> keys;     // distinct, as sent
  std::vector<std::size_t> request_index;  // per key of the request, its index in `keys`
  std::uint64_t object_bytes = 0;
  std::vector<fleet::ReadyPeer> peers;
  // Per peer, the keys it is asked for (indices into `keys`), and whether
  // the directory named it in step (a miss there is a wrong hint).
  std::vector<std::vector<std::size_t>> asked;
  std::vector<bool> named;
  // Per peer, its addresses (one per key asked), or nullopt: no usable
  // answer; and the task that holds them.
  std::vector<std::optional<std::vector<protocol::P2pAddress>>> answers;
  std::vector<std::int64_t> tasks;
  std::atomic<std::size_t> left{0};
  TimeMs deadline_ms = 0;
  LookupDone done;

  void Ask(std::size_t peer, std::string keys_frame, std::string layouts_frame);
  void Query(std::size_t peer, std::int64_t task, int queries);
  void Answered(std::size_t peer, std::optional<std::vector<protocol::P2pAddress>> answer);
  std::shared_ptr<Lookup> self;  // held while a call is in flight; dropped at Resolve
};

void P2pAdapter::Lookup::Ask(std::size_t peer, std::string keys_frame, std::string layouts_frame) {
  rpc->Call(peers[peer].rpc, Op::kP2pLookupAndLock, {std::move(keys_frame), std::move(layouts_frame)},
            deadline_ms, [this, peer](Result<std::string> reply) {
              if (!reply.ok()) return Answered(peer, std::nullopt);
              Result<std::int64_t> task = protocol::DecodeInt(*reply, "p2p_lookup_and_lock's task id");
              if (!task.ok()) return Answered(peer, std::nullopt);
              Query(peer, *task, 1);
            });
}

void P2pAdapter::Lookup::Query(std::size_t peer, std::int64_t task, int queries) {
  rpc->Call(peers[peer].rpc, Op::kP2pQueryLookupResults, {EncodeInt(task)}, deadline_ms,
            [this, peer, task, queries](Result<std::string> reply) {
              // Given up on: whatever the task locked there ends now, not
              // at the owner's read TTL (an answer past our deadline, one we
              // cannot use, or none by then).
              auto give_up = [&] {
                adapter->SendEndTask(peers[peer].rpc, task);
                Answered(peer, std::nullopt);
              };
              if (!reply.ok()) return give_up();
              auto addresses = protocol::DecodeP2pAddresses(*reply);
              if (!addresses.ok()) return give_up();
              if (!addresses->has_value()) {  // not ready yet (a reference owner works async)
                if (queries >= kMaxQueries || clock->NowMs() >= deadline_ms) return give_up();
                return Query(peer, task, queries + 1);
              }
              if ((*addresses)->size() != asked[peer].size()) return give_up();
              tasks[peer] = task;
              Answered(peer, std::move(*addresses));
            });
}

void P2pAdapter::Lookup::Answered(std::size_t peer,
                                  std::optional<std::vector<protocol::P2pAddress>> answer) {
  answers[peer] = std::move(answer);
  if (left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  std::shared_ptr<Lookup> keep = std::move(self);  // this lookup lives to the end of Resolve
  adapter->Resolve(*this);
}

P2pAdapter::P2pAdapter(const fleet::PeerAccess* peers)
    : peers_(peers), shared_(std::make_shared<Shared>()) {}

P2pAdapter::~P2pAdapter() {
  // Locks still held at peers (a prefetch that never unlocked: cannot
  // happen through the controller) end at the owners' read TTL.
  MutexLock lock(&mu_);
  if (locked_ > 0) spdlog::warn("the p2p adapter ends with {} locks held at peers", locked_);
}

Status P2pAdapter::AttachMemory(std::span<std::byte> pool) {
  pool_ = pool;
  return Status::Ok();
}

void P2pAdapter::SubmitStore(std::span<const L2Write> objects, StoreDone done) {
  done(std::vector<Status>(objects.size(),
                           Status(ErrorCode::kInvalidArgument, "the peers are not stored to")));
}

std::vector<bool> P2pAdapter::LookupAndLock(std::span<const store::ObjectKey> keys) {
  return std::vector<bool>(keys.size(), false);
}

void P2pAdapter::SubmitLookup(std::span<const store::ObjectKey> keys, std::uint64_t object_bytes,
                              LookupDone done) {
  std::vector<fleet::ReadyPeer> peers = peers_->Ready();
  // A peer that cuts a model's prompts into other chunks holds none of its
  // keys. A lookup names one model in practice: each peer is checked once
  // per distinct model, not per key.
  std::vector<std::string_view> models;
  for (const store::ObjectKey& key : keys) {
    if (std::ranges::find(models, key.model_name) == models.end()) models.push_back(key.model_name);
  }
  std::erase_if(peers, [&](const fleet::ReadyPeer& peer) {
    return peer.chunks != nullptr && std::ranges::any_of(models, [&](std::string_view model) {
             return !peer.chunks->Agrees(model);
           });
  });
  if (peers.empty() || keys.empty() || object_bytes == 0) {
    done(std::vector<bool>(keys.size(), false));
    return;
  }
  auto lookup = std::make_shared<Lookup>();
  lookup->adapter = this;
  lookup->rpc = peers_;
  lookup->clock = &peers_->clock();
  lookup->object_bytes = object_bytes;
  lookup->deadline_ms = peers_->clock().NowMs() + peers_->lookup_timeout_ms();
  lookup->done = std::move(done);
  // Distinct keys: the owner locks a key once per task, so a repeated key
  // must not become two locks of ours.
  std::unordered_map<store::ObjectKey, std::size_t, store::ObjectKeyHash> seen;
  for (const store::ObjectKey& key : keys) {
    auto [it, added] = seen.try_emplace(key, lookup->keys.size());
    if (added) lookup->keys.push_back(key);
    lookup->request_index.push_back(it->second);
  }
  lookup->peers = std::move(peers);
  Plan(*lookup);
  if (fleet::P2pLookupCounters* counts = peers_->lookup_counters()) {
    counts->lookups.fetch_add(1, std::memory_order_relaxed);
  }
  std::vector<std::size_t> asking;  // the peers asked for at least one key
  for (std::size_t p = 0; p < lookup->peers.size(); ++p) {
    if (!lookup->asked[p].empty()) asking.push_back(p);
  }
  lookup->answers.resize(lookup->peers.size());
  lookup->tasks.resize(lookup->peers.size());
  if (asking.empty()) {  // the directory named nobody
    std::vector<bool> held(lookup->keys.size(), false);
    CountOutcome(*lookup, held);
    lookup->done(std::vector<bool>(keys.size(), false));
    return;
  }
  if (fleet::P2pLookupCounters* counts = peers_->lookup_counters()) {
    counts->rpcs.fetch_add(asking.size(), std::memory_order_relaxed);
  }
  lookup->left.store(asking.size(), std::memory_order_relaxed);
  std::vector<std::pair<std::string, std::string>> frames;  // per peer asked
  for (const std::size_t p : asking) {
    std::vector<store::ObjectKey> subset;
    subset.reserve(lookup->asked[p].size());
    for (const std::size_t k : lookup->asked[p]) subset.push_back(lookup->keys[k]);
    frames.emplace_back(KeysFrame(subset), LayoutsFrame(subset, object_bytes));
  }
  Lookup* raw = lookup.get();
  raw->self = std::move(lookup);
  // `raw` may be resolved and freed by the last peer's answer: nothing of
  // it is read after the last Ask.
  for (std::size_t i = 0; i < asking.size(); ++i) {
    raw->Ask(asking[i], std::move(frames[i].first), std::move(frames[i].second));
  }
}

void P2pAdapter::Plan(Lookup& lookup) const {
  const std::size_t peer_count = lookup.peers.size();
  lookup.asked.assign(peer_count, {});
  lookup.named.assign(peer_count, false);
  const fleet::PeerDirectory* directory = peers_->directory();
  if (directory == nullptr) {  // broadcast: every ready peer, every key
    std::vector<std::size_t> all(lookup.keys.size());
    for (std::size_t k = 0; k < all.size(); ++k) all[k] = k;
    lookup.asked.assign(peer_count, all);
    return;
  }
  // Directed: each key at one peer the directory names in step, the one
  // with the longest leading run of this lookup's chunks first (and the
  // previous key's peer when it is named too, so a prompt's keys go to as
  // few peers as may hold them); a key no peer in step names goes to every
  // stale peer (its filter is not to be trusted, as under broadcast); a key
  // nobody names is asked nowhere.
  const std::vector<fleet::ChunkId> per_key = fleet::ChunkIdsOf(lookup.keys);
  // The prompt's chunks in order, once each (a chunk's ranks and groups share an id).
  const std::vector<fleet::ChunkId> ids = fleet::Distinct(per_key);
  std::unordered_map<fleet::PeerId, std::size_t> index;  // ready peer -> position
  for (std::size_t p = 0; p < peer_count; ++p) index.emplace(lookup.peers[p].rpc, p);
  // Ready peers not in step (stale, or not yet known to the directory: a
  // peer that just joined or came back) may hold anything.
  std::vector<bool> in_step(peer_count, false);
  for (const fleet::PeerId peer : directory->InStepPeers()) {
    if (auto at = index.find(peer); at != index.end()) in_step[at->second] = true;
  }
  std::vector<std::size_t> stale;
  for (std::size_t p = 0; p < peer_count; ++p) {
    if (!in_step[p]) stale.push_back(p);
  }
  std::unordered_map<fleet::PeerId, std::size_t> rank;  // longest run first
  for (const fleet::PeerPrefix& prefix : directory->Prefixes(ids)) {
    auto at = index.find(prefix.peer);
    if (at != index.end() && in_step[at->second]) rank.emplace(prefix.peer, rank.size());
  }
  std::optional<std::size_t> previous;
  for (std::size_t k = 0; k < lookup.keys.size(); ++k) {
    std::optional<std::size_t> chosen;
    std::size_t chosen_rank = SIZE_MAX;
    for (const fleet::PeerId holder : directory->MayHold(per_key[k])) {
      auto at = index.find(holder);
      if (at == index.end()) continue;
      if (!in_step[at->second]) continue;
      if (previous && at->second == *previous) {
        chosen = previous;
        break;
      }
      auto r = rank.find(holder);
      const std::size_t holder_rank = r == rank.end() ? rank.size() : r->second;
      if (holder_rank < chosen_rank) {
        chosen = at->second;
        chosen_rank = holder_rank;
      }
    }
    if (chosen) {
      lookup.asked[*chosen].push_back(k);
      lookup.named[*chosen] = true;
      previous = chosen;
      continue;
    }
    for (const std::size_t p : stale) lookup.asked[p].push_back(k);
  }
}

void P2pAdapter::CountOutcome(const Lookup& lookup, const std::vector<bool>& held) const {
  fleet::P2pLookupCounters* counts = peers_->lookup_counters();
  if (counts == nullptr) return;
  std::uint64_t found = 0;
  std::uint64_t unnamed = 0;
  std::vector<bool> asked_anywhere(lookup.keys.size(), false);
  std::uint64_t wrong = 0;
  for (std::size_t p = 0; p < lookup.asked.size(); ++p) {
    for (const std::size_t k : lookup.asked[p]) {
      asked_anywhere[k] = true;
      if (lookup.named[p] && !held[k]) wrong += 1;
    }
  }
  for (std::size_t k = 0; k < held.size(); ++k) {
    found += held[k] ? 1 : 0;
    unnamed += asked_anywhere[k] ? 0 : 1;
  }
  counts->found_chunks.fetch_add(found, std::memory_order_relaxed);
  counts->missed_keys.fetch_add(held.size() - found, std::memory_order_relaxed);
  counts->unnamed_keys.fetch_add(unnamed, std::memory_order_relaxed);
  counts->wrong_hints.fetch_add(wrong, std::memory_order_relaxed);
}

void P2pAdapter::Resolve(Lookup& lookup) {
  std::vector<bool> held(lookup.keys.size(), false);
  std::vector<std::vector<store::ObjectKey>> release(lookup.peers.size());
  {
    MutexLock lock(&mu_);
    for (std::size_t p = 0; p < lookup.peers.size(); ++p) {
      if (!lookup.answers[p]) continue;
      for (std::size_t j = 0; j < lookup.asked[p].size(); ++j) {
        const std::size_t k = lookup.asked[p][j];
        const protocol::P2pAddress& address = (*lookup.answers[p])[j];
        if (!address.valid()) continue;  // a miss: nothing locked there
        const bool usable = static_cast<std::uint64_t>(address.size) == lookup.object_bytes;
        if (held[k] || !usable) {  // held at an earlier peer, or not what we asked for
          release[p].push_back(lookup.keys[k]);
          continue;
        }
        held[k] = true;
        Location at;
        at.id = next_location_++;
        at.rpc = lookup.peers[p].rpc;
        at.task = lookup.tasks[p];
        at.channel = lookup.peers[p].channel;
        at.offset = static_cast<std::uint64_t>(address.offset);
        at.size = static_cast<std::uint64_t>(address.size);
        locks_[lookup.keys[k]].push_back(at);
        locked_ += 1;
      }
    }
  }
  for (std::size_t p = 0; p < lookup.peers.size(); ++p) {
    if (!release[p].empty()) {
      SendUnlock(lookup.peers[p].rpc, lookup.tasks[p], std::move(release[p]));
    }
  }
  CountOutcome(lookup, held);
  // A repeated key was locked once: only its first place in the request holds it.
  std::vector<bool> found(lookup.request_index.size(), false);
  for (std::size_t i = 0; i < found.size(); ++i) {
    const std::size_t k = lookup.request_index[i];
    found[i] = held[k];
    held[k] = false;
  }
  lookup.done(std::move(found));
}

void P2pAdapter::SendUnlock(fleet::PeerId peer, std::int64_t task,
                            std::vector<store::ObjectKey> keys) {
  SendRelease(peer, Op::kP2pUnlockTask, {EncodeInt(task), KeysFrame(keys)});
}

void P2pAdapter::SendEndTask(fleet::PeerId peer, std::int64_t task) {
  // A reference owner has no such operation: it answers an error, and the
  // task ends at its own reaper or read TTL, as without this call.
  SendRelease(peer, Op::kP2pEndTask, {EncodeInt(task)});
}

void P2pAdapter::SendRelease(fleet::PeerId peer, Op op, std::vector<std::string> frames) {
  peers_->Call(peer, op, std::move(frames), peers_->clock().NowMs() + peers_->lookup_timeout_ms(),
               [](Result<std::string>) {
                 // Nothing to do either way: what the call could not end
                 // ends at the owner's reaper or read TTL.
               });
}

std::optional<P2pAdapter::Location> P2pAdapter::EndOneLock(const store::ObjectKey& key) {
  auto it = locks_.find(key);
  if (it == locks_.end()) return std::nullopt;
  std::list<Location>& held = it->second;
  auto idle = std::find_if(held.begin(), held.end(), [](const Location& at) {
    return at.reading == 0 && at.release_after_read == 0;
  });
  if (idle == held.end()) {
    // Every lock is being read through (or already ends after its reads):
    // the first not yet ending ends once its reads have.
    auto busy = std::find_if(held.begin(), held.end(), [](const Location& at) {
      return at.release_after_read < 1;
    });
    if (busy != held.end()) busy->release_after_read += 1;
    return std::nullopt;
  }
  const Location ended = *idle;
  held.erase(idle);
  locked_ -= 1;
  if (held.empty()) locks_.erase(it);
  return ended;
}

void P2pAdapter::Unlock(std::span<const store::ObjectKey> keys) {
  std::map<std::pair<fleet::PeerId, std::int64_t>, std::vector<store::ObjectKey>> by_task;
  {
    MutexLock lock(&mu_);
    for (const store::ObjectKey& key : keys) {
      if (auto at = EndOneLock(key)) by_task[{at->rpc, at->task}].push_back(key);
    }
  }
  for (auto& [task, task_keys] : by_task) SendUnlock(task.first, task.second, std::move(task_keys));
}

void P2pAdapter::ReadEnded(const store::ObjectKey& key, std::uint64_t location) {
  std::optional<Location> unlock;
  {
    MutexLock lock(&mu_);
    auto it = locks_.find(key);
    if (it == locks_.end()) return;
    auto at = std::find_if(it->second.begin(), it->second.end(),
                           [&](const Location& l) { return l.id == location; });
    if (at == it->second.end()) return;
    at->reading -= 1;
    if (at->reading > 0 || at->release_after_read == 0) return;
    unlock = *at;
    it->second.erase(at);
    locked_ -= 1;
    if (it->second.empty()) locks_.erase(it);
  }
  SendUnlock(unlock->rpc, unlock->task, {key});
}

namespace {

// One SubmitLoad's reads, by peer, shared with the channel's completions.
struct LoadCall {
  std::vector<L2LoadOutcome> outcomes;
  std::vector<std::uint64_t> bytes;
  std::atomic<std::size_t> left{0};
  L2Adapter::LoadDone done;
};

}  // namespace

void P2pAdapter::SubmitLoad(std::span<const L2Read> reads, LoadDone done) {
  auto call = std::make_shared<LoadCall>();
  call->outcomes.assign(reads.size(), L2LoadOutcome::kMissing);
  call->bytes.assign(reads.size(), 0);
  call->done = std::move(done);
  struct Batch {
    std::vector<fleet::UcxRead> reads;
    std::vector<std::size_t> index;
    std::vector<std::pair<store::ObjectKey, std::uint64_t>> through;  // key, location id
  };
  std::map<fleet::PeerHandle, Batch> batches;
  {
    MutexLock lock(&mu_);
    for (std::size_t i = 0; i < reads.size(); ++i) {
      auto it = locks_.find(*reads[i].key);
      if (it == locks_.end()) continue;  // not locked by a lookup of ours: a miss
      // Through the lock with the fewest reads: while fewer requests read a
      // key than hold locks on it, each reads through a lock of its own.
      auto at = std::min_element(it->second.begin(), it->second.end(),
                                 [](const Location& a, const Location& b) {
                                   return a.reading < b.reading;
                                 });
      const std::span<std::byte> out = reads[i].out;
      const bool in_pool = !pool_.empty() && out.data() >= pool_.data() &&
                           out.data() + out.size() <= pool_.data() + pool_.size();
      if (at->size != out.size() || !in_pool) continue;
      at->reading += 1;
      Batch& batch = batches[at->channel];
      batch.reads.push_back({at->offset, static_cast<std::uint64_t>(out.data() - pool_.data()),
                             at->size, at->task});
      batch.index.push_back(i);
      batch.through.emplace_back(*reads[i].key, at->id);
      call->bytes[i] = at->size;
    }
  }
  if (batches.empty()) {
    for (const L2LoadOutcome o : call->outcomes) shared_->counters.CountLoad(o, 0);
    call->done(std::move(call->outcomes));
    return;
  }
  call->left.store(batches.size(), std::memory_order_relaxed);
  const TimeMs deadline = peers_->clock().NowMs() + peers_->load_timeout_ms();
  for (auto& [peer, batch] : batches) {
    peers_->Read(peer, std::move(batch.reads), deadline,
                  [this, call, index = std::move(batch.index), through = std::move(batch.through),
                   shared = shared_](Status, std::vector<bool> landed) {
                    // A failed batch (its peer died, its deadline passed)
                    // keeps the reads that landed whole.
                    for (std::size_t j = 0; j < index.size(); ++j) {
                      const bool whole = j < landed.size() && landed[j];
                      call->outcomes[index[j]] = whole ? L2LoadOutcome::kLoaded : L2LoadOutcome::kFailed;
                    }
                    // Done with the slots (the channel writes none after
                    // this): the locks read through may end.
                    for (const auto& [key, location] : through) ReadEnded(key, location);
                    if (call->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
                    for (std::size_t i = 0; i < call->outcomes.size(); ++i) {
                      shared->counters.CountLoad(call->outcomes[i], call->bytes[i]);
                    }
                    call->done(std::move(call->outcomes));
                  });
  }
}

L2AdapterStats P2pAdapter::Stats() const {
  L2AdapterStats s;
  shared_->counters.CopyTo(&s);
  s.type = "p2p";
  s.description = "p2p";
  s.io_engine = "ucx";
  MutexLock lock(&mu_);
  s.objects = locked_;
  return s;
}

}  // namespace lmcache::tier
