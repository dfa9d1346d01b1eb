#include "events/kv_event_recorder.h"

#include <sys/random.h>

#include <algorithm>

#include "common/blake3.h"
#include "common/clock.h"

namespace lmcache::events {
namespace {

const std::string kL1Location = "L1";

// The keys of one (model, salt, tags), distinct chunk hashes in order of first sight.
struct Group {
  const store::ObjectKey* first = nullptr;
  std::vector<store::ChunkHash> hashes;
};

// A chunk is one object per worker rank (and per KV group): a router knows
// chunks, not ranks, so the chunk is announced by the object of rank 0's
// first KV group, which every store of a tensor-parallel group writes,
// once, rather than once per rank.
bool SpeaksForItsChunk(const store::ObjectKey& key) {
  return (key.kv_rank & 0xff) == 0 && key.object_group_id == 0;
}

std::vector<Group> GroupByTenant(std::span<const store::ObjectKey> keys) {
  std::vector<Group> groups;
  for (const store::ObjectKey& key : keys) {
    if (!SpeaksForItsChunk(key)) continue;
    auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.first->model_name == key.model_name && g.first->cache_salt == key.cache_salt &&
             g.first->tags == key.tags;
    });
    if (group == groups.end()) group = groups.insert(groups.end(), Group{&key, {}});
    // The same chunk in another layout namespace comes in the same batch
    // (keys are chunk-major), so looking back a few entries finds a repeat.
    const auto& hashes = group->hashes;
    const auto window = hashes.size() > 64 ? hashes.end() - 64 : hashes.begin();
    if (std::find(window, hashes.end(), key.chunk_hash) == hashes.end()) {
      group->hashes.push_back(key.chunk_hash);
    }
  }
  return groups;
}

}  // namespace

KvEventRecorder::KvEventRecorder(KvEventLog* log, TokenBindings* bindings,
                                 store::ChunkSizes chunk_sizes)
    : log_(log), bindings_(bindings), chunk_sizes_(std::move(chunk_sizes)) {
  if (getrandom(tenant_key_.data(), tenant_key_.size(), 0) !=
      static_cast<ssize_t>(tenant_key_.size())) {
    // No entropy: tenants are still told apart, only not unlinkable across servers.
    tenant_key_.fill(0x5a);
  }
}

std::string KvEventRecorder::TenantOf(std::string_view cache_salt, std::string_view tags) const {
  if (cache_salt.empty() && tags.empty()) return {};
  Blake3Hasher hasher(tenant_key_);
  // The salt's length first: no salt and tag set spell another pair's input.
  const std::uint64_t salt_size = cache_salt.size();
  hasher.Update(&salt_size, sizeof(salt_size));
  hasher.Update(cache_salt.data(), cache_salt.size());
  hasher.Update(tags.data(), tags.size());
  return ToHex(hasher.Finalize()).substr(0, 16);  // 64 bits: tenants stay apart
}

KvEvent KvEventRecorder::Event(KvEventKind kind, std::string_view medium,
                               const std::string& location, const store::ObjectKey& key) const {
  KvEvent event;
  event.kind = kind;
  event.medium = medium;
  event.location = location;
  event.model_name = key.model_name;
  event.tenant = TenantOf(key.cache_salt, key.tags);
  event.block_size = static_cast<std::uint32_t>(chunk_sizes_.For(key.model_name));
  event.timestamp = WallClockSeconds();
  return event;
}

void KvEventRecorder::RecordStored(std::string_view medium, const std::string& location,
                                   std::span<const store::ObjectKey> keys) {
  if (!log_->recording()) return;
  std::vector<KvEvent> events;
  for (const Group& group : GroupByTenant(keys)) {
    const KvEvent base = Event(KvEventKind::kStored, medium, location, *group.first);
    const std::vector<std::optional<TokenBinding>> bindings =
        bindings_->FindAll(group.first->model_name, group.hashes);
    for (std::size_t i = 0; i < group.hashes.size(); ++i) {
      if (!bindings[i]) {
        counters_.unbound_stores.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      KvEvent& event = events.emplace_back(base);
      event.block_hashes.push_back(group.hashes[i]);
      event.parent_block_hash = bindings[i]->parent;
      event.tokens = bindings[i]->tokens;
    }
  }
  log_->Append(std::move(events));
}

void KvEventRecorder::RecordRemoved(std::string_view medium, const std::string& location,
                                    std::span<const store::ObjectKey> keys) {
  if (!log_->recording()) return;
  std::vector<KvEvent> events;
  for (Group& group : GroupByTenant(keys)) {
    KvEvent& event = events.emplace_back(Event(KvEventKind::kRemoved, medium, location, *group.first));
    event.block_hashes = std::move(group.hashes);
  }
  log_->Append(std::move(events));
}

void KvEventRecorder::OnAdmitted(std::span<const store::ObjectKey> keys,
                                 std::span<const std::uint64_t>, store::AdmissionSource) {
  RecordStored(kMediumCpu, kL1Location, keys);
}

void KvEventRecorder::OnEvicted(std::span<const store::ObjectKey> keys,
                                std::span<const std::uint64_t>) {
  RecordRemoved(kMediumCpu, kL1Location, keys);
}

void KvEventRecorder::OnDeleted(std::span<const store::ObjectKey> keys,
                                std::span<const std::uint64_t>) {
  RecordRemoved(kMediumCpu, kL1Location, keys);
}

void KvEventRecorder::OnL2Stored(const std::string& location,
                                 std::span<const store::ObjectKey> keys) {
  RecordStored(kMediumStorage, location, keys);
}

void KvEventRecorder::OnL2Removed(const std::string& location,
                                  std::span<const store::ObjectKey> keys) {
  RecordRemoved(kMediumStorage, location, keys);
}

void KvEventRecorder::OnCleared() {
  if (!log_->recording()) return;
  KvEvent event;
  event.kind = KvEventKind::kCleared;
  event.medium = kMediumCpu;
  event.location = kL1Location;
  event.block_size = static_cast<std::uint32_t>(chunk_sizes_.default_size());  // every model's
  event.timestamp = WallClockSeconds();
  std::vector<KvEvent> events;
  events.push_back(std::move(event));
  log_->Append(std::move(events));
}

KvEventRecorderStats KvEventRecorder::Stats() const {
  KvEventRecorderStats stats;
  counters_.CopyTo(&stats);
  stats.binding_bytes = bindings_->bytes();
  return stats;
}

LMC_STATS_ROWS(KvEventRecorderStatRows, KvEventRecorderStats, LMC_KV_EVENT_RECORDER_STATS)

}  // namespace lmcache::events
